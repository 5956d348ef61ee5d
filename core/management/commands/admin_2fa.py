from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django_otp.plugins.otp_totp.models import TOTPDevice

from core.services import (
    TwoFactorDeviceExists,
    admin_totp_device_enrol,
    admin_totp_devices_remove,
)


class Command(BaseCommand):
    help = (
        "Second factors of admin users (TOTP). `enrol USERNAME [--replace]` prints the "
        "device's otpauth:// URL once, as the last line: add it to an authenticator app. "
        "`remove USERNAME`, `list`."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        enrol = sub.add_parser("enrol", help="give a staff user a TOTP device")
        enrol.add_argument("username")
        enrol.add_argument(
            "--replace", action="store_true", help="replace the user's devices"
        )
        remove = sub.add_parser("remove", help="remove a user's TOTP devices")
        remove.add_argument("username")
        sub.add_parser("list", help="users with a TOTP device (never a secret)")

    def handle(self, *args, action, **options):
        if action == "enrol":
            self._enrol(options["username"], replace=options["replace"])
        elif action == "remove":
            count = admin_totp_devices_remove(username=options["username"])
            self.stdout.write(f"removed {count} device(s) of {options['username']!r}")
        else:
            field = get_user_model().USERNAME_FIELD
            for device in TOTPDevice.objects.select_related("user").order_by("user_id"):
                self.stdout.write(
                    f"{getattr(device.user, field)}\t{device.name}\t"
                    f"{'confirmed' if device.confirmed else 'unconfirmed'}"
                )

    def _enrol(self, username: str, *, replace: bool) -> None:
        try:
            device = admin_totp_device_enrol(username=username, replace=replace)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r} (or not staff)") from None
        except TwoFactorDeviceExists:
            raise CommandError(
                f"{username!r} already has a device: give --replace to replace it"
            ) from None
        self.stdout.write(
            f"enrolled a TOTP device for {username!r}; add this URL to the user's "
            "authenticator app (shown once):"
        )
        self.stdout.write(device.config_url)
