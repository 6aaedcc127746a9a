vcl 4.1;
# Varnish for bench/api/run.sh: a reverse-proxy cache in front of the origin on 127.0.0.1:18180.
# Started as `taskset -c 1 varnishd -F -j none -n DIR -a ADDR -T ADDR -S SECRET -f THIS
# -s malloc,256m -p thread_pools=1` (one core's worth, MEASURING.md; -T/-S: the management
# port varnishadm adds the bans through).
backend origin {
    .host = "127.0.0.1";
    .port = "18180";
}
