# trove bench: Varnish in front of the bench origin. Started by `trove bench compare` as
#   varnishd -F -a 127.0.0.1:{{PORT}} -f <this file> -n {{DIR}}/varnish -s malloc,{{MEM_MB}}m
#            -p thread_pools=1
# The built-in VCL does the rest: it caches `Cache-Control: public` responses for their
# Expires lifetime and passes `private, no-cache` ones.
vcl 4.1;

backend origin {
    .host = "{{ORIGIN_HOST}}";
    .port = "{{ORIGIN_PORT}}";
}
