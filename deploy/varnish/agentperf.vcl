vcl 4.1;
# AgentPerf Leaderboard in front of its Django web tier (docs/caching.md).
#
# Django decides what may be cached (Cache-Control: public with s-maxage, or private,
# no-store) and which surrogate keys an answer carries (the xkey header); this file only
# keeps anonymous GETs together, normalizes the one request header the site varies on
# (Accept, under /api/) and answers PURGE with an xkey-purge header from the web tier.
#
# Start (the backend's address is replaced when the test suite starts its own Varnish,
# tests/services.py):
#   varnishd -a 127.0.0.1:6081 -f $PWD/deploy/varnish/agentperf.vcl -s malloc,256m
# and set VARNISH_PURGE_URL=http://127.0.0.1:6081/ for the web processes and workers.

import std;
import xkey;

backend default {
    .host = "127.0.0.1";
    .port = "8000";
    .connect_timeout = 2s;
    .first_byte_timeout = 60s;
}

# who may purge: the web tier and its Celery workers
acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "purge not allowed from " + client.ip));
        }
        if (!req.http.xkey-purge) {
            return (synth(400, "xkey-purge header missing"));
        }
        # a hard purge: a purged answer is never served again, not even in grace
        set req.http.n-gone = xkey.purge(req.http.xkey-purge);
        return (synth(200, "purged " + req.http.n-gone));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # a signed-in reader (session cookie) or an API token: always the web tier
    if (req.http.Authorization || req.http.Cookie ~ "(^|;\s*)sessionid=") {
        return (pass);
    }
    # nothing an anonymous answer depends on is in a cookie
    unset req.http.Cookie;
    # the API negotiates the browsable HTML or JSON: two variants, not one per browser
    if (req.url ~ "^/api/") {
        if (req.http.Accept ~ "text/html") {
            set req.http.Accept = "text/html";
        } else {
            set req.http.Accept = "application/json";
        }
    }
    return (hash);
}

sub vcl_backend_response {
    # Django's Cache-Control decides (builtin: private/no-store are not stored); an answer
    # that sets a cookie is never shared
    if (beresp.http.Set-Cookie) {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
        return (deliver);
    }
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    # the surrogate keys are for this cache only
    unset resp.http.xkey;
}
