"""Bad flags and config files, met through the ResNet trainer (the config
layer and the run lifecycle are common to every trainer)."""
from case import Case

RESNET = ("{build}/bin/resnet --config={root}/image_classification/configs/small.conf "
          "--data_dir={resnet_data} --device=cpu --log_file={tmp}/run.log")


def out_of_range(name, flag, allowed, doc):
    value = flag.split("=", 1)[1]
    key = flag.split("=", 1)[0]
    return Case(name, RESNET + " " + flag, f"error: {key}: {value} is outside {allowed}", 2, doc)


def long_line(t):
    t.write("long.conf", "submission_platform = " + "x" * 5000 + "\nmax_epochs = 0\n")


def bom(t):
    t.write("bom.conf", b"\xef\xbb\xbfmax_epochs = 0\n")


CASES = [
    Case("config_is_a_directory", RESNET + " --config={tmp}",
         "error: {tmp}: is not a config file (a directory?)", 2,
         "--config names a directory (once read as an empty config)"),
    Case("config_missing_file", RESNET + " --config={tmp}/none.conf",
         "error: {tmp}/none.conf: cannot open config file: No such file or directory", 2,
         "--config names no file"),
    Case("config_line_over_4096_bytes", RESNET + " --config={tmp}/long.conf",
         "error: {tmp}/long.conf:2: max_epochs: 0 is outside [1, 1000000]", 2,
         "a 5,000-byte line is one line (once split in two at 4,096): the error is on line 2",
         setup=long_line),
    Case("config_byte_order_mark", RESNET + " --config={tmp}/bom.conf",
         "error: {tmp}/bom.conf:1: max_epochs: 0 is outside [1, 1000000]", 2,
         "a UTF-8 byte-order mark before the first key is skipped", setup=bom),
    Case("flag_unknown", RESNET + " --momentun=0.9",
         "error: --momentun: unknown key (--help lists the keys)", 2, "a misspelt flag"),
    Case("flag_wrong_type", RESNET + " --max_epochs=ten",
         "error: --max_epochs: wants an integer, got 'ten'", 2, "a flag of the wrong type"),
    Case("flag_not_a_choice", RESNET + " --optimizer=adam",
         "error: --optimizer: 'adam' is not one of lars|sgd", 2, "a string outside its choices"),
    out_of_range("eval_every_zero", "--eval_every=0", "[1, inf)", "once a division by zero (SIGFPE)"),
    out_of_range("eval_every_negative", "--eval_every=-2", "[1, inf)", "a negative cadence"),
    out_of_range("max_epochs_zero", "--max_epochs=0", "[1, 1000000]", "no epoch to train"),
    out_of_range("max_epochs_negative", "--max_epochs=-3", "[1, 1000000]", "a negative epoch limit"),
    out_of_range("resize_side_zero", "--resize_side=0", "[8, 4096]", "no eval resize"),
    out_of_range("crop_scale_min_zero", "--crop_scale_min=0", "(0, 1]", "an empty crop"),
    out_of_range("crop_scale_min_two", "--crop_scale_min=2", "(0, 1]", "a crop larger than the image"),
    out_of_range("crop_scale_min_negative", "--crop_scale_min=-1", "(0, 1]", "a negative crop area"),
    out_of_range("label_smoothing_over_one", "--label_smoothing=1.5", "[0, 1)",
                 "smoothing that leaves no weight on the label"),
    out_of_range("loader_threads_zero", "--loader_threads=0", "[1, 256]", "no loader thread (once unclear)"),
    out_of_range("loader_threads_huge", "--loader_threads=100000", "[1, 256]",
                 "100,000 threads (once an internal error from pthread_create)"),
    out_of_range("batch_size_zero", "--batch_size=0", "[1, inf)", "an empty batch"),
    Case("eval_offset_not_below_cadence", RESNET + " --eval_every=2 --eval_offset=2",
         "error: --eval_offset: 2 is not below --eval_every=2", 2, "an offset of a whole cadence"),
    Case("no_eval_before_max_epochs", RESNET + " --eval_every=4 --max_epochs=2",
         "error: --max_epochs: 2 ends the run before the first eval (after epoch 4)", 2,
         "a run that could never evaluate"),
    Case("eval_epochs_unsorted", RESNET + " --eval_epochs=4,2",
         "error: --eval_epochs: epoch 2 after 4: the epochs must ascend", 2, "a fixed eval schedule out of order"),
    Case("eval_epochs_zero", RESNET + " --eval_epochs=0,2",
         "error: --eval_epochs: item 1 (0) is not a whole epoch >= 1", 2, "an eval before any training"),
    Case("eval_epochs_after_max_epochs", RESNET + " --max_epochs=3 --eval_epochs=2,4",
         "error: --eval_epochs: epoch 4 is after --max_epochs=3", 2, "an eval the run never reaches"),
    Case("resize_side_below_crop", RESNET + " --resize_side=16",
         "error: --resize_side: 16 is smaller than the 32-pixel eval crop (--image_size)", 2,
         "an eval resize smaller than its centre crop"),
    Case("no_data_dir", "{build}/bin/resnet --device=cpu --log_file={tmp}/run.log",
         "error: --data_dir: no data set given (--data_dir=DIR)", 2, "no data set named"),
]
