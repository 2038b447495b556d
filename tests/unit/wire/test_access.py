"""wire/access.py on strings alone: the API key, the Host check against DNS rebinding, CORS.

The names are the ones an attacker picks: a loopback name as a prefix, suffix or infix of
their own domain, look-alikes in other scripts and their IDNA forms, trailing dots, ports,
IPv6 spellings and userinfo. A Host reaches host_ok only once the request head's grammar
(http_head.is_host: host[:port], a port 0-65535, no userinfo) has passed it, so `served` checks both, as the
server does; host_ok also refuses on its own what that grammar refuses.
"""

from __future__ import annotations

import socket

import pytest

from localserve.dialects.exchange import Scope
from localserve.wire.access import CORS_ALLOW_HEADERS, AccessPolicy, load_api_keys
from localserve.wire.http_head import is_host

GUARDED = AccessPolicy(api_keys=["k1", "k2"], allowed_hosts=["llm.internal", ".lan.example"],
                       cors_origins=["http://app.example"])
OPEN = AccessPolicy()


def served(policy: AccessPolicy, host: str) -> bool:
    """Whether a request with this Host is answered: the head's grammar, then the Host check."""
    return is_host(host) and policy.host_ok(host)


# ---- Host ------------------------------------------------------------------------------

LOOPBACK_AND_IP = [
    "localhost", "LOCALHOST", "LocalHost:8080", "localhost.", "localhost.:8080", "localhost:",
    "localhost.localdomain", "ip6-localhost", "ip6-loopback", "app.localhost", "a.b.localhost:1",
    "app.localhost.",
    "127.0.0.1", "127.0.0.1:8080", "127.1.2.3", "0.0.0.0", "192.168.1.20:80", "10.0.0.1",
    "[::1]", "[::1]:8080", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]:80", "[fe80::1]",
    "localhost:0", "localhost:65535", "127.0.0.1:00080", "[::1]:65535",
]


@pytest.mark.parametrize("host", LOOPBACK_AND_IP)
def test_loopback_names_and_ip_literals_are_served(host):
    assert served(OPEN, host) and served(GUARDED, host)


REBINDING_NAMES = [
    # a loopback name as a prefix, suffix or infix of the attacker's own name
    "localhost.evil.com", "localhost.evil.com:8080", "evil-localhost.com", "evillocalhost.com",
    "evil.com.localhost.evil.com", "localhost-evil.com", "localhostevil.com", "mylocalhost",
    "localhost.localdomain.evil.com", "evil-ip6-localhost.com", "ip6-loopback.evil.com",
    "xlocalhost", "localhostx", "localhost_", "localhos", "ocalhost",
    # an IP address inside a name: wildcard DNS services resolve these to the address
    "127.0.0.1.nip.io", "127.0.0.1.evil.com:8080", "evil.127.0.0.1.com", "0x7f000001.evil.com",
    # IDNA: a look-alike (Cyrillic "о") in its ASCII form, and a punycode name
    "l\u043ecalhost".encode("idna").decode("ascii"), "xn--localhost-9db.com",
    # trailing dots and ports on other names
    "evil.com.", "evil.com.:80", "evil.com:80",
    # the allow-list's own tricks: a suffix rule needs the dot, an exact rule the whole name
    "lan.example.org", "evil-lan.example", "llm.internal.evil.com", "evilllm.internal",
    "attacker.test:8080", "evil.example.com", "",
]


@pytest.mark.parametrize("host", REBINDING_NAMES)
def test_other_names_are_refused(host):
    assert not GUARDED.host_ok(host) and not served(GUARDED, host)
    assert not OPEN.host_ok(host)


@pytest.mark.parametrize("host", [
    "localhost:80@evil.com", "user@localhost", "localhost@evil.com", "user:pass@localhost:8080",
    "localhost:abc", "localhost:80:80", "[::1]evil.com", "[::1]:80@evil.com", "localhost evil.com",
    "localhost/evil", "localhost\\evil", "localhost#evil", "localhost?x", "l\u043ecalhost",
    "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54",     # full-width: browsers send its IDNA form
    # ports past 65535, and IP literals that are no IPv6 address
    "localhost:99999999999999999999", "localhost:65536", "127.0.0.1:70000", "[::1]:65536",
    "[:::::]", "[1.2.3.4]", "[::1::2]", "[12345::1]", "[::1]:" + "9" * 5000,
])
def test_userinfo_and_junk_never_reach_the_host_check(host):
    # The head's grammar refuses these (a 400) before host_ok sees them, and host_ok refuses them too.
    assert not is_host(host)
    assert not GUARDED.host_ok(host) and not OPEN.host_ok(host)


def test_idna_lookalikes_are_not_localhost():
    cyrillic_o = "l\u043ecalhost"
    assert not OPEN.host_ok(cyrillic_o)
    assert not OPEN.host_ok(cyrillic_o.encode("idna").decode("ascii"))
    # full-width letters normalise to "localhost" under IDNA: that is what a browser puts in Host
    assert "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54".encode("idna") == b"localhost"


@pytest.mark.parametrize("host", ["llm.internal", "LLM.Internal:8080", "llm.internal.", "box.lan.example",
                                  "a.b.lan.example:443", "box.lan.example."])
def test_allowed_hosts_exact_and_by_suffix(host):
    assert GUARDED.host_ok(host) and served(GUARDED, host)
    assert not OPEN.host_ok(host)


def test_a_bare_suffix_rule_does_not_allow_the_bare_domain():
    assert not GUARDED.host_ok("lan.example")      # ".lan.example" allows names under it only


def test_allowed_host_star_allows_any_name():
    anything = AccessPolicy(allowed_hosts=["*"])
    assert anything.host_ok("localhost.evil.com") and anything.host_ok("evil-localhost.com")


def test_this_machines_hostname_is_served():
    name = socket.gethostname()
    assert OPEN.host_ok(name) and OPEN.host_ok(name.upper() + ":8080")
    assert not OPEN.host_ok(name + ".evil.com") and not OPEN.host_ok("evil-" + name)


def test_no_host_header_is_http10_and_is_served():
    assert OPEN.host_ok(None) and GUARDED.host_ok(None)


# ---- API keys --------------------------------------------------------------------------

@pytest.mark.parametrize("authorization,x_api_key", [
    ("Bearer k1", None), ("bearer k2", None), ("BEARER k1", None), ("Bearer   k1  ", None),
    (None, "k1"), (None, "k2"), ("Basic abc", "k1"),
])
def test_a_right_key_passes(authorization, x_api_key):
    assert GUARDED.key_ok(authorization, x_api_key)


@pytest.mark.parametrize("authorization,x_api_key", [
    (None, None), ("", ""), ("Bearer", None), ("Bearer ", None), ("Bearer k3", None), ("k1", None),
    ("Basic k1", None), ("Bearer k1x", None), ("Bearer k", None), ("Bearer K1", None), (None, "k11"),
    (None, " k1"), ("Bearer k1 k2", None), ("Bearer wrong", "k1"),     # Authorization decides when it is a bearer
    ("Bearer k\u00e91", None),
])
def test_a_wrong_or_missing_key_fails(authorization, x_api_key):
    assert not GUARDED.key_ok(authorization, x_api_key)


def test_no_keys_means_no_key_is_required_and_none_matches():
    assert not OPEN.requires_key and GUARDED.requires_key
    assert not OPEN.key_ok("Bearer anything", "anything")


def test_key_file_lines_comments_and_blanks(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# a comment\n\n  spaced  \nplain\n#not-a-key\n")
    assert load_api_keys(["flag", ""], str(path)) == ["flag", "spaced", "plain"]
    assert load_api_keys(["flag"], None) == ["flag"]


# ---- CORS ------------------------------------------------------------------------------

@pytest.mark.parametrize("origin", [
    None, "", "null", "http://evil.example", "http://app.example.evil.com", "http://app.example:8080",
    "https://app.example", "http://APP.example", "http://app.example/", "http://evil.app.example",
    "http://app.exampl", "http://app.example ",
])
def test_only_an_exactly_listed_origin_gets_cors_headers(origin):
    assert not GUARDED.origin_ok(origin)
    assert GUARDED.cors_headers(origin) == []
    assert GUARDED.preflight_headers(origin, "GET, POST", None) == []


def test_a_listed_origin_gets_cors_and_preflight_headers():
    headers = dict(GUARDED.cors_headers("http://app.example"))
    assert headers["Access-Control-Allow-Origin"] == "http://app.example" and headers["Vary"] == "Origin"
    preflight = dict(GUARDED.preflight_headers("http://app.example", "POST, OPTIONS", "authorization"))
    assert preflight["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    assert preflight["Access-Control-Allow-Headers"] == "authorization"
    asked_nothing = dict(GUARDED.preflight_headers("http://app.example", "GET", None))
    assert asked_nothing["Access-Control-Allow-Headers"] == CORS_ALLOW_HEADERS


def test_cors_is_off_by_default_and_star_allows_any_origin():
    assert not OPEN.origin_ok("http://localhost:3000")
    star = AccessPolicy(cors_origins=["*"])
    assert star.origin_ok("http://evil.example")
    assert dict(star.cors_headers("http://evil.example"))["Access-Control-Allow-Origin"] == "http://evil.example"
    assert not star.origin_ok(None) and not star.origin_ok("")


# ---- scopes: whose caches and stored responses a key's request may see (issue 44) ------------

def test_each_of_several_keys_has_a_scope_of_its_own_that_is_not_the_key():
    k1 = GUARDED.key_scope("Bearer k1", None)
    k2 = GUARDED.key_scope(None, "k2")
    assert k1 is not None and k2 is not None and k1 != k2
    assert k1.owner == k1.cache and "k1" not in k1.owner
    assert GUARDED.key_scope("Bearer k1", None) == k1           # the same key, the same scope, every time
    assert GUARDED.key_scope("Bearer k3", None) is None


def test_one_key_is_one_user_and_shared_cache_widens_only_the_caches():
    assert AccessPolicy(api_keys=["only"]).key_scope("Bearer only", None) == Scope()
    assert AccessPolicy(api_keys=["same", "same"]).key_scope("Bearer same", None) == Scope()
    team = AccessPolicy(api_keys=["k1", "k2"], shared_cache=True)
    k1, k2 = team.key_scope("Bearer k1", None), team.key_scope("Bearer k2", None)
    assert k1.cache == k2.cache == "" and k1.owner != k2.owner
