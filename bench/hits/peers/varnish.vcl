vcl 4.1;

# Varnish (Debian's package) as a reverse-proxy cache in front of the origin on 127.0.0.1:18080,
# listening on 127.0.0.1:18082. run.sh starts it as (every flag that is not a default says why):
#
#   taskset -c 1 varnishd -F                  # foreground, so run.sh owns the PID
#       -j none                               # no privilege-separation jail: it runs from a temp dir, as root
#       -n @RUN@/varnish                      # working dir (VSM, compiled VCL) in the temp dir, not /var/lib/varnish
#       -a 127.0.0.1:18082 -T none            # loopback listener; no management CLI port (nothing to talk to it)
#       -f @RUN@/varnish/varnish.vcl          # this file
#       -s malloc,256m                        # memory storage is the default; the 256 MB cap (default: none) matches the other peers
#       -p thread_pools=1                     # MEASURING.md: one thread pool, i.e. one core's worth (default 2)
#       -p timeout_idle=600                   # default 5 s: idle client connections must survive the idle-connection test
#
# The object is cacheable under the built-in VCL as it is (GET, no cookie, no Authorization,
# max-age=3600), so this VCL only names the backend and adds a hit/miss header.
#
# Logging: varnishd writes every request's log records to its shared-memory log (VSL, in the -n
# dir), never to a file, and nothing here reads it into a file (no varnishncsa): no write system
# call per request, which is comparable with (cheaper than) trove's access log buffered in memory
# and written every 100 ms. The other peers' file logs are buffered likewise (see their configs).

backend origin {
    .host = "127.0.0.1";
    .port = "18080";
}

sub vcl_deliver {
    # Non-default: lets run.sh's warm-up see whether the response was a hit.
    if (obj.hits > 0) {
        set resp.http.X-Cache-Status = "HIT";
    } else {
        set resp.http.X-Cache-Status = "MISS";
    }
}
