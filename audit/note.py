"""Signed notes (C2SP ``signed-note``) with Ed25519, and the checkpoints of the log written as
such notes (C2SP ``tlog-checkpoint``): docs/security.md, "Verifiable log".

Like ``audit/merkle.py`` this module imports nothing of Django: the offline verifier uses it.

Keys use the encodings of Go's ``golang.org/x/mod/sumdb/note``, which other tools of the
field read and write:

- signer key (``AUDIT_SIGNING_KEY``, secret): ``PRIVATE+KEY+<name>+<hex key id>+<base64(0x01 ||
  32-byte Ed25519 seed)>``;
- verifier key (``GET /audit/public-key``): ``<name>+<hex key id>+<base64(0x01 || 32-byte
  public key)>``,

where the key id is the first 4 bytes of ``SHA-256(name || 0x0A || 0x01 || public key)``.

A note is its text (ending in a newline), a blank line, then signature lines ``— <name>
<base64(key id || signature)>``; the signature is Ed25519 over the text, final newline
included."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import struct
import unicodedata
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ALG_ED25519 = 0x01
SIGNATURE_PREFIX = "\u2014 "  # em dash, space
# The C2SP verifier rules: at least 16 signatures must be accepted; more than this is refused
# rather than parsed for ever.
MAX_SIGNATURES = 100


class NoteError(ValueError):
    """A key, note or checkpoint that is malformed or does not verify; the message says
    what."""


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise NoteError(f"{what} is not standard base64") from None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def key_name_valid(name: str) -> bool:
    """Non-empty, no Unicode space, no plus."""
    return (
        bool(name)
        and "+" not in name
        and not any(c.isspace() or unicodedata.category(c) == "Zs" for c in name)
    )


def key_id(name: str, public_key: bytes) -> int:
    """``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(
        name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key
    ).digest()
    return struct.unpack(">I", digest[:4])[0]


def _public_bytes(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class Verifier:
    name: str
    key_id: int
    public_key: bytes

    @property
    def vkey(self) -> str:
        """The verifier key string."""
        material = _b64encode(bytes([ALG_ED25519]) + self.public_key)
        return f"{self.name}+{self.key_id:08x}+{material}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                signature, message
            )
        except InvalidSignature:
            return False
        return True


class Signer:
    """An Ed25519 note signer, from a signer key string (``signer_parse``)."""

    def __init__(self, name: str, seed: bytes) -> None:
        self._private = Ed25519PrivateKey.from_private_bytes(seed)
        public = _public_bytes(self._private)
        self.verifier = Verifier(
            name=name, key_id=key_id(name, public), public_key=public
        )

    @property
    def name(self) -> str:
        return self.verifier.name

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    def __repr__(self) -> str:  # never the key
        return f"<Signer {self.verifier.vkey}>"


def verifier_parse(vkey: str) -> Verifier:
    """Parses a verifier key; raises ``NoteError`` naming what is wrong."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3:
        raise NoteError("a verifier key is <name>+<hex key id>+<base64 key>")
    name, id_hex, material_b64 = parts
    if not key_name_valid(name):
        raise NoteError("the key name is empty or has a space or a plus")
    if not re.fullmatch(r"[0-9a-f]{8}", id_hex):
        raise NoteError("the key id is not 8 lowercase hex digits")
    material = _b64decode(material_b64, "the key")
    if len(material) != 33 or material[0] != ALG_ED25519:
        raise NoteError("the key is not an Ed25519 key (0x01 and 32 bytes)")
    public = material[1:]
    if key_id(name, public) != int(id_hex, 16):
        raise NoteError("the key id does not match the name and key")
    return Verifier(name=name, key_id=int(id_hex, 16), public_key=public)


def signer_parse(skey: str) -> Signer:
    """Parses a signer key (``PRIVATE+KEY+<name>+<hex key id>+<base64(0x01 || seed)>``);
    raises ``NoteError`` naming what is wrong, never quoting the key."""
    parts = skey.strip().split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise NoteError(
            "a signing key is PRIVATE+KEY+<name>+<hex key id>+<base64 key> "
            "(manage.py audit_keygen makes one)"
        )
    _, _, name, id_hex, material_b64 = parts
    if not key_name_valid(name):
        raise NoteError("the key name is empty or has a space or a plus")
    if not re.fullmatch(r"[0-9a-f]{8}", id_hex):
        raise NoteError("the key id is not 8 lowercase hex digits")
    material = _b64decode(material_b64, "the key")
    if len(material) != 33 or material[0] != ALG_ED25519:
        raise NoteError("the key is not an Ed25519 key (0x01 and a 32-byte seed)")
    signer = Signer(name, material[1:])
    if signer.verifier.key_id != int(id_hex, 16):
        raise NoteError("the key id does not match the name and key")
    return signer


def key_generate(name: str) -> tuple[str, str]:
    """A new (signer key, verifier key) pair for ``name``."""
    if not key_name_valid(name):
        raise NoteError("the key name is empty or has a space or a plus")
    seed = secrets.token_bytes(32)
    signer = Signer(name, seed)
    skey = (
        f"PRIVATE+KEY+{name}+{signer.verifier.key_id:08x}+"
        f"{_b64encode(bytes([ALG_ED25519]) + seed)}"
    )
    return skey, signer.verifier.vkey


# --- Notes ----------------------------------------------------------------------------------


def _text_check(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("a note's text ends in a newline")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note has no control character but newline")


def note_sign(*, text: str, signer: Signer) -> str:
    """The signed note: ``text``, a blank line, one signature line."""
    _text_check(text)
    signature = signer.sign(text.encode())
    blob = struct.pack(">I", signer.verifier.key_id) + signature
    return f"{text}\n{SIGNATURE_PREFIX}{signer.name} {_b64encode(blob)}\n"


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: int
    signature: bytes


def note_split(note: str) -> tuple[str, list[Signature]]:
    """The text and the signature lines of a note, checked for form only."""
    if any((ord(c) < 0x20 and c != "\n") or 0xD800 <= ord(c) <= 0xDFFF for c in note):
        raise NoteError("the note has a control character or is not valid UTF-8")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("the note has no blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block or not block.endswith("\n"):
        raise NoteError(
            "the note's signature block is empty or lacks its final newline"
        )
    signatures = []
    for line in block[:-1].split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(
                "a signature line does not start with an em dash and a space"
            )
        name, sep, blob_b64 = line[len(SIGNATURE_PREFIX) :].partition(" ")
        if not sep or not key_name_valid(name) or not blob_b64:
            raise NoteError("a signature line is not '— <name> <base64>'")
        blob = _b64decode(blob_b64, "a signature")
        if len(blob) < 5:
            raise NoteError("a signature is too short")
        signatures.append(
            Signature(
                name=name, key_id=struct.unpack(">I", blob[:4])[0], signature=blob[4:]
            )
        )
        if len(signatures) > MAX_SIGNATURES:
            raise NoteError(f"the note has more than {MAX_SIGNATURES} signatures")
    return text, signatures


def note_open(*, note: str, verifier: Verifier) -> str:
    """The note's text, once its signature by ``verifier`` is checked. Signatures by other
    keys (a witness's cosignature, say) are ignored, as C2SP requires; a signature by this
    key that fails, or none by it at all, raises ``NoteError``."""
    text, signatures = note_split(note)
    verified = False
    for signature in signatures:
        if (signature.name, signature.key_id) != (verifier.name, verifier.key_id):
            continue
        if not verifier.verify(text.encode(), signature.signature):
            raise NoteError(
                f"the signature of {verifier.name} does not verify over the note's text"
            )
        verified = True
    if not verified:
        raise NoteError(f"the note carries no signature of {verifier.name}")
    return text


# --- Checkpoints ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()


def checkpoint_text(*, origin: str, size: int, root: bytes) -> str:
    """The checkpoint's note text: origin, tree size, base64 root hash, one per line."""
    if not origin or "\n" in origin:
        raise NoteError("the origin is empty or has a newline")
    if size < 0 or len(root) != 32:
        raise NoteError("a checkpoint has a tree size >= 0 and a 32-byte root")
    return f"{origin}\n{size}\n{_b64encode(root)}\n"


def checkpoint_parse(text: str) -> Checkpoint:
    """Parses a checkpoint's note text (``note_open``'s result)."""
    if not text.endswith("\n"):
        raise NoteError("the checkpoint does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or any(not line for line in lines):
        raise NoteError("a checkpoint has at least three non-empty lines")
    origin, size_text, root_b64, *extensions = lines
    if not re.fullmatch(r"0|[1-9][0-9]*", size_text):
        raise NoteError("the checkpoint's tree size is not a decimal number")
    root = _b64decode(root_b64, "the checkpoint's root hash")
    if len(root) != 32:
        raise NoteError("the checkpoint's root hash is not 32 bytes")
    return Checkpoint(
        origin=origin, size=int(size_text), root=root, extensions=tuple(extensions)
    )
