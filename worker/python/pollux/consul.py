"""A minimal client of Consul's KV HTTP API (standard library only): what
the reporter and the launcher's rendezvous need, reads, check-and-set
writes, blocking queries and deletes."""

import base64
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import NamedTuple, Optional, Tuple

__all__ = ["ConsulError", "KVPair", "Consul"]


class ConsulError(Exception):
    """Consul could not be reached or answered with an error."""



class KVPair(NamedTuple):
    key: str
    value: bytes
    create_index: int
    modify_index: int


class Consul:
    """A minimal client of Consul's KV HTTP API.

    addr is host:port or a URL (default CONSUL_HTTP_ADDR, else
    127.0.0.1:8500); token defaults to CONSUL_HTTP_TOKEN. For https,
    CONSUL_CACERT, CONSUL_CLIENT_CERT / CONSUL_CLIENT_KEY and
    CONSUL_HTTP_SSL_VERIFY are honoured.
    """

    def __init__(self, addr: Optional[str] = None, token: Optional[str] = None, timeout: float = 10.0):
        addr = addr or os.environ.get("CONSUL_HTTP_ADDR") or "127.0.0.1:8500"
        if "://" not in addr:
            ssl_on = os.environ.get("CONSUL_HTTP_SSL", "").lower() in ("1", "true")
            addr = ("https://" if ssl_on else "http://") + addr
        if not addr.startswith(("http://", "https://")):
            raise ValueError("unsupported Consul address %r: want http or https" % addr)
        self.base = addr.rstrip("/")
        self.token = token if token is not None else os.environ.get("CONSUL_HTTP_TOKEN", "")
        self.timeout = timeout
        self._ssl = None
        if self.base.startswith("https://"):
            ctx = ssl.create_default_context(cafile=os.environ.get("CONSUL_CACERT") or None)
            if os.environ.get("CONSUL_CLIENT_CERT"):
                ctx.load_cert_chain(os.environ["CONSUL_CLIENT_CERT"], os.environ.get("CONSUL_CLIENT_KEY") or None)
            if os.environ.get("CONSUL_HTTP_SSL_VERIFY", "").lower() in ("0", "false"):
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx

    def _request(self, method, key, query=None, body=None, timeout=None):
        url = "%s/v1/kv/%s" % (self.base, urllib.parse.quote(key, safe="/"))
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, data=body, method=method)
        if self.token:
            req.add_header("X-Consul-Token", self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            data = e.read()
            if e.code == 404:
                return 404, e.headers, data
            raise ConsulError("consul %s %s: HTTP %d: %s" % (method, key, e.code, data.decode(errors="replace").strip())) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ConsulError("consul %s %s: %s" % (method, key, e)) from None

    def get(self, key: str, index: int = 0, wait: Optional[float] = None,
            timeout: Optional[float] = None) -> Tuple[Optional[KVPair], int]:
        """Read a key; with index > 0 a blocking query that returns when the
        key's index passes index or after wait seconds. Returns the pair
        (None if absent) and Consul's index (X-Consul-Index)."""
        query = {}
        if index:
            query["index"] = str(index)
            if wait:
                query["wait"] = "%dms" % int(wait * 1000)
                timeout = max(timeout or self.timeout, wait * 17 / 16 + 5)
        status, headers, data = self._request("GET", key, query, timeout=timeout)
        last = int(headers.get("X-Consul-Index") or 0)
        if status == 404:
            return None, last
        try:
            entry = json.loads(data)[0]
            value = base64.b64decode(entry["Value"]) if entry.get("Value") is not None else b""
            return KVPair(entry["Key"], value, int(entry["CreateIndex"]), int(entry["ModifyIndex"])), last
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ConsulError("consul GET %s: unexpected answer: %s" % (key, e)) from None

    def cas(self, key: str, value: bytes, index: int, timeout: Optional[float] = None) -> bool:
        """Write a key only if its ModifyIndex is still index (0: only if
        it does not exist); False on conflict."""
        _, _, data = self._request("PUT", key, {"cas": str(index)}, value, timeout)
        return data.strip() == b"true"

    def put(self, key: str, value: bytes, timeout: Optional[float] = None):
        """Write a key unconditionally."""
        self._request("PUT", key, None, value, timeout)

    def delete(self, key: str, recurse: bool = False, timeout: Optional[float] = None):
        """Delete a key, or with recurse every key under it."""
        self._request("DELETE", key, {"recurse": "true"} if recurse else None, None, timeout)
