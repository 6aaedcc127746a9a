# bench/disk/refault.py FILE: drops FILE from the page cache and reads it back in 4 KiB pages in
# random order (order-0 folios), for BEFORE_ROUNDS in bench/disk/run.sh.
import os, random, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDONLY)
size = os.fstat(fd).st_size
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
pages = list(range(0, size, 4096)); random.shuffle(pages)
for off in pages: os.pread(fd, 4096, off)
print(f"refaulted {len(pages)} pages of {p} in 4 KiB random order", file=sys.stderr)
