"""What tools do: kinds of tools, the argument names each kind reads, and classifiers.

The extractor does not know a user's tools; it knows *kinds* of tool (a shell, a file
reader, an HTTP client, a mailer, a payment API) and maps tool names to kinds, with a
default table of common names that a user extends. For each kind it reads a few
arguments, under any of several usual names (``path``, ``file_path``, ``filename``...).

The classifiers are plain regular expressions, deliberately conservative: they name
the well-known ways a run goes wrong (a credential file, a recursive delete of a home
directory, a pipe from ``curl`` into a shell), not every possible one.
"""
from __future__ import annotations

import re
from enum import Enum
from ipaddress import ip_address
from urllib.parse import urlsplit


class ToolKind(str, Enum):
    """What a tool does, as far as safety is concerned."""

    SHELL = "shell"
    READ_FILE = "read_file"
    WRITE_FILE = "write_file"
    DELETE_FILE = "delete_file"
    HTTP_GET = "http_get"          # fetches content: untrusted input from outside
    HTTP_POST = "http_post"        # sends data to a URL
    HTTP = "http"                  # either, by its ``method`` argument
    WEB_SEARCH = "web_search"      # results are untrusted input
    EMAIL_READ = "email_read"      # an inbox is untrusted input
    EMAIL_SEND = "email_send"
    PAYMENT = "payment"
    MESSAGE = "message"            # a chat message to a person or channel (Slack, Teams...)
    OTHER = "other"                # harmless as far as this domain knows


# Kinds whose calls only read: they change nothing a person approving a call would weigh (an approval
# covers one call; a read after it is not a second consequence, guard/judge.py). HTTP (by its method
# argument) and OTHER (unknown effects) are not among them.
READ_KINDS = frozenset({ToolKind.READ_FILE, ToolKind.HTTP_GET, ToolKind.WEB_SEARCH, ToolKind.EMAIL_READ})

DEFAULT_TOOL_KINDS: dict[str, ToolKind] = {
    **dict.fromkeys(("shell", "bash", "sh", "terminal", "run_shell", "run_command", "execute_command",
                     "exec", "run_bash", "shell_command"), ToolKind.SHELL),
    **dict.fromkeys(("read_file", "cat", "open_file", "view_file", "read_text_file", "file_read"),
                    ToolKind.READ_FILE),
    **dict.fromkeys(("write_file", "create_file", "edit_file", "save_file", "append_file", "file_write"),
                    ToolKind.WRITE_FILE),
    **dict.fromkeys(("delete_file", "remove_file", "rm", "unlink", "file_delete"), ToolKind.DELETE_FILE),
    **dict.fromkeys(("http_get", "fetch", "fetch_url", "browse", "open_url", "get_url", "read_webpage",
                     "requests_get"), ToolKind.HTTP_GET),
    **dict.fromkeys(("http_post", "post", "post_url", "requests_post", "upload", "webhook"), ToolKind.HTTP_POST),
    **dict.fromkeys(("http_request", "http", "request", "requests"), ToolKind.HTTP),
    **dict.fromkeys(("web_search", "search", "search_web", "google", "bing_search", "tavily_search",
                     "duckduckgo_search"), ToolKind.WEB_SEARCH),
    **dict.fromkeys(("read_inbox", "read_email", "read_emails", "list_emails", "get_emails", "check_inbox"),
                    ToolKind.EMAIL_READ),
    **dict.fromkeys(("send_email", "send_mail", "email", "reply_email", "forward_email", "gmail_send_message"),
                    ToolKind.EMAIL_SEND),
    **dict.fromkeys(("pay", "make_payment", "send_payment", "pay_invoice", "transfer_money", "transfer_funds",
                     "wire_transfer"), ToolKind.PAYMENT),
    **dict.fromkeys(("send_slack", "send_slack_message", "slack_send_message", "slack_post_message", "post_to_slack",
                     "send_message", "post_message", "send_chat_message", "chat_post_message",
                     "send_teams_message"), ToolKind.MESSAGE),
}

# Per kind: (field, accepted argument names, required)
ARGUMENT_NAMES: dict[ToolKind, tuple[tuple[str, tuple[str, ...], bool], ...]] = {
    ToolKind.SHELL: (("command", ("command", "cmd", "commands", "script", "code"), True),),
    ToolKind.READ_FILE: (("path", ("path", "file_path", "filepath", "filename", "file", "name"), True),),
    ToolKind.WRITE_FILE: (("path", ("path", "file_path", "filepath", "filename", "file", "name"), True),
                          ("content", ("content", "text", "data", "contents", "body"), False)),
    ToolKind.DELETE_FILE: (("path", ("path", "file_path", "filepath", "filename", "file", "name"), True),),
    ToolKind.HTTP_GET: (("url", ("url", "uri", "link", "address", "href"), True),),
    ToolKind.HTTP_POST: (("url", ("url", "uri", "endpoint", "address", "href"), True),
                         ("body", ("body", "data", "json", "payload", "content", "text"), False)),
    ToolKind.HTTP: (("url", ("url", "uri", "endpoint", "address", "href"), True),
                    ("method", ("method", "verb"), False),
                    ("body", ("body", "data", "json", "payload", "content", "text"), False)),
    ToolKind.WEB_SEARCH: (),
    ToolKind.EMAIL_READ: (),
    ToolKind.EMAIL_SEND: (("to", ("to", "recipient", "recipients", "email", "address", "to_address"), True),
                          ("cc", ("cc", "bcc"), False),
                          ("body", ("body", "content", "message", "text", "html"), False)),
    ToolKind.PAYMENT: (("amount", ("amount", "value", "sum", "total", "amount_usd"), True),
                       ("payee", ("payee", "recipient", "to", "vendor", "beneficiary", "account"), False)),
    ToolKind.MESSAGE: (("to", ("to", "channel", "recipient", "recipients", "user", "user_id", "channel_id",
                               "chat_id", "conversation", "conversation_id"), True),
                       ("text", ("text", "message", "content", "body", "msg"), False)),
    ToolKind.OTHER: (),
}

DEFAULT_INTERNAL_DOMAINS: tuple[str, ...] = ("corp.example",)

_SECRET_PATH = re.compile(
    r"""(?ix)
    (^|[/\\\s"'=:~])(
        \.env(\.[\w-]+)?                      # .env, .env.production
      | \.ssh/(id_[\w-]+(?<!\.pub)|authorized_keys|known_hosts|config)
      | id_(rsa|dsa|ecdsa|ed25519)(?!\.pub)\b
      | \.aws/(credentials|config)
      | \.kube/config | \.docker/config\.json | \.git-credentials | \.netrc | \.pgpass | \.npmrc | \.pypirc
      | (credentials|secrets?|service[-_]account|tokens?)\.(json|ya?ml|toml|txt|env|ini)
      | [\w.-]+\.(pem|key|p12|pfx|keystore)
      | /etc/(shadow|gshadow|sudoers)
      | /proc/[\w]+/environ
    )($|[\s"';|&)>])
    """)
_SECRET_COMMAND = re.compile(
    r"""(?ix)
    (^|[;&|]\s*|\s)(
        printenv\b | env\s*($|[;&|]) | set\s*($|[;&|])
      | aws\s+(configure\s+(get|export-credentials)|secretsmanager\s+get-secret-value|sts\s+get-session-token)
      | gcloud\s+auth\s+(print-access-token|application-default\s+print-access-token)
      | kubectl\s+get\s+secrets?\b
      | vault\s+(read|kv\s+get)\b
      | security\s+find-generic-password
    )""")
_SECRET_CONTENT = re.compile(
    r"""(?x)
      AKIA[0-9A-Z]{16}
    | -----BEGIN\ [A-Z ]*PRIVATE\ KEY-----
    | \bsk-[A-Za-z0-9_-]{16,}
    | \b[rs]k_(live|test)_[A-Za-z0-9]{10,}
    | \bgh[pousr]_[A-Za-z0-9]{20,}
    | \bxox[abpr]-[A-Za-z0-9-]{10,}
    | (?i:(password|passwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)[\w-]*\s*[:=]\s*["']?[^\s"']{6,})
    """)
_DESTRUCTIVE = [re.compile(p, re.IGNORECASE) for p in (
    # recursive delete of a root, home, system or the current directory
    r"\brm\s+(-\w+\s+)*-\w*[rR]\w*\s+(-\w+\s+)*(--no-preserve-root\s+)?"
    r"(/|/\*|~|~/|~/\*|\$HOME/?\*?|\*|\.|\./\*|/(etc|usr|var|bin|sbin|boot|home|opt|lib|root|srv)/?\S*)(\s|$|;|&|\|)",
    r"\brm\s+--recursive\b.*\s(/|~|\*)(\s|$)",
    r"\bfind\s+/\S*\s.*-delete\b",
    r"\bmkfs(\.\w+)?\b",
    r"\bdd\s+.*\bof=/dev/(sd|nvme|hd|disk|xvd)",
    r">\s*/dev/(sd|nvme|hd|disk|xvd)[a-z0-9]*",
    r"\bshred\s+",
    r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
    r"\bchmod\s+(-\w+\s+)*0?777\s+/(\s|$|\w)",
    r"\bchown\s+-R\s+\S+\s+/(\s|$)",
    r"\bgit\s+push\b.*(\s--force\b|\s-f\b|\s--force-with-lease\b)",
    r"\bgit\s+reset\s+--hard\b",
    r"\bgit\s+clean\s+-\w*[fdx]\w*[fdx]",
    r"\bdrop\s+(table|database|schema)\b",
    r"\btruncate\s+(table\s+)?\w+",
    r"\bdelete\s+from\s+[\w.\"]+\s*(;|\"|'|$)",
    r"\bkubectl\s+delete\s+(ns\b|namespace\b|.*--all\b)",
    r"\bterraform\s+destroy\b",
    r"\b(shutdown|poweroff|halt)\b(\s+-\w+|\s+now|\s*$)",
    r"\b(curl|wget)\b[^|;]*\|\s*(sudo\s+)?(ba|z|da)?sh\b",
)]
_UPLOAD = re.compile(r"""(?ix)
      \bcurl\b.*\s(-d|--data(-[a-z]+)?|-F|--form|-T|--upload-file|-X\s*(POST|PUT|PATCH))(\s|=|$)
    | \bwget\b.*--(post|body)-(data|file)
    | \bhttp(ie)?\s+(POST|PUT|PATCH)\b""")
_URL = re.compile(r"https?://[^\s'\"|;<>]+", re.IGNORECASE)
_REMOTE_COPY = re.compile(r"\b(scp|rsync|sftp)\b.*?\s(?:[\w.-]+@)?"
                          r"([A-Za-z0-9][\w.-]*\.[A-Za-z]{2,}|\d+\.\d+\.\d+\.\d+):")
_NETCAT = re.compile(r"\b(nc|ncat|netcat)\s+(-\w+\s+)*([A-Za-z0-9][\w.-]*)\s+\d+")
_INJECTION = re.compile(r"""(?ix)
      \bignore\s+(all\s+|any\s+)?(previous|prior|above)\s+instructions
    | \b(ai|llm)\s+(assistant|agent)s?\s*[:,]
    | \b(attention|note\s+to)\s+(the\s+)?(ai|assistant|agent)\b
    | \byou\s+must\s+now\b
    | \b(send|post|upload|forward|reply\s+with|email)\b[^.\n]{0,60}
      (\bcredentials|\bapi\s+keys?|\bsecrets?\b|\bpasswords?\b|\btokens?\b|\.env\b|\bid_rsa|\bprivate\s+key)
    | \b(read|cat|open)\s+~?/?\.(aws|ssh|env)\b
    | \b(curl|wget)\b[^|\n]*\|\s*(sudo\s+)?(ba|z)?sh\b""")
_HOST_SUFFIX_LOCAL = ("localhost", ".local", ".internal", ".localdomain")
_METADATA_HOSTS = frozenset({"169.254.169.254", "metadata.google.internal", "fd00:ec2::254"})
_NUMBER = re.compile(r"(?<![\w.])\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])")


def is_secret_path(path: str) -> bool:
    """A credential file: ``.env``, ``~/.ssh/id_rsa``, ``~/.aws/credentials``, ``*.pem``..."""
    return _SECRET_PATH.search(" " + path.strip() + " ") is not None


def reads_secret(command: str) -> bool:
    """A shell command that touches a credential file or dumps credentials."""
    return is_secret_path(command) or _SECRET_COMMAND.search(" " + command) is not None


def has_secret(text: str) -> bool:
    """Text that contains something shaped like a credential (an AWS key, a private key...)."""
    return _SECRET_CONTENT.search(text) is not None


def has_injection(text: str) -> bool:
    """Content that gives the agent instructions (a prompt injection), by the usual tells.

    A heuristic: it catches text addressed to an AI, requests to send credentials and
    pipes from the network into a shell; a subtle injection passes unnoticed.
    """
    return _INJECTION.search(text) is not None


def is_destructive(command: str) -> bool:
    """A command that destroys data or a system, or runs code piped from the network."""
    return any(p.search(command) for p in _DESTRUCTIVE)


def shell_upload_hosts(command: str) -> list[str]:
    """Hosts a shell command sends data to (``curl -d``, ``scp``, ``nc``...), in order."""
    hosts: list[str] = []
    if _UPLOAD.search(command):
        hosts.extend(h for h in (url_host(u) for u in _URL.findall(command)) if h)
    hosts.extend(m.group(2).lower() for m in _REMOTE_COPY.finditer(command))
    hosts.extend(m.group(3).lower() for m in _NETCAT.finditer(command))
    return list(dict.fromkeys(hosts))


def url_host(url: str) -> str | None:
    """The host of a URL (a bare ``host/path`` is read as ``http://host/path``), or None."""
    text = url.strip()
    if not text:
        return None
    if "://" not in text:
        text = "http://" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    return host.lower() if host else None


def _in_domains(host: str, domains: tuple[str, ...]) -> bool:
    return any(host == d or host.endswith("." + d) for d in domains)


def is_internal_host(host: str, internal_domains: tuple[str, ...]) -> bool:
    """Loopback, private addresses, ``*.local``/``*.internal`` and the organisation's domains."""
    if host in _METADATA_HOSTS:
        return True
    if host == "localhost" or host.endswith(_HOST_SUFFIX_LOCAL) or _in_domains(host, internal_domains):
        return True
    try:
        address = ip_address(host)
    except ValueError:
        return False
    return address.is_private or address.is_loopback


def is_metadata_host(host: str) -> bool:
    """A cloud instance-metadata endpoint (hands out credentials to whoever asks)."""
    return host in _METADATA_HOSTS


def email_domain(address: str) -> str | None:
    """The domain of an address (``Bob <bob@x.com>`` included), or None if it is not one."""
    text = address.strip()
    if "<" in text and text.endswith(">"):
        text = text[text.rindex("<") + 1:-1]
    local, at, domain = text.rpartition("@")
    if not at or not local or "." not in domain or " " in text:
        return None
    return domain.lower()


def is_internal_address(domain: str, internal_domains: tuple[str, ...]) -> bool:
    return _in_domains(domain, internal_domains)


def parse_amount(value: object) -> float | None:
    """A payment amount: a number, or a string such as ``"$2,400.00"`` or ``"2400 USD"``."""
    if value.__class__ is bool:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = _NUMBER.search(value)
        if match and not value.strip().startswith("-"):
            return float(match.group(1).replace(",", "") + (match.group(2) or ""))
    return None


def amounts_in(text: str) -> set[float]:
    """Every number written in a text (``$2,400``, ``2400.00``, ``120``), as floats."""
    return {float(m.group(1).replace(",", "") + (m.group(2) or "")) for m in _NUMBER.finditer(text)}
