"""The console's formats for English (``FORMAT_MODULE_PATH``): every date and time to the
second, with its zone, sortable as text (``core.times.time_display`` writes the same)."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
TIME_FORMAT = "H:i:s"
