"""No view of the product takes uploads (docs/security.md, "Request bodies"): the one upload
handler (``FILE_UPLOAD_HANDLERS``) skips every file of a multipart body, so that parsing one
(the admin's forms may be posted multipart) never stores a file, in memory or on disk. No
admin form has a file field (``tests/core/test_request_bodies.py``)."""

from django.core.files.uploadhandler import FileUploadHandler, SkipFile


class FilesSkippedUploadHandler(FileUploadHandler):
    def new_file(self, *args, **kwargs):
        raise SkipFile()

    def receive_data_chunk(self, raw_data, start):
        return None

    def file_complete(self, file_size):
        return None
