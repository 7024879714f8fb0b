package store

import (
	"io"
	"os"
	"syscall"
)

// fileBytes is a whole file in memory (read at once, or mapped), for the
// walk at open, which reads every page: a pread per page cost more in
// system calls than the walk itself (65 MB file, warm cache, build machine:
// 105 ms through pread, 18 ms through a map). Every read is checked against
// the length held, so a damaged page cannot send the walk outside it.
type fileBytes struct {
	data []byte
}

// readAllMax is the largest file read into memory rather than mapped:
// unmapping cost up to a millisecond on the (virtual) build machine, more
// than reading a small file; kept small so the read adds little to the
// heap at start.
const readAllMax = 256 << 10

// loadFile returns the first size bytes of f to walk, and a function that
// releases them. Small files are read into memory; larger ones are mapped
// read-only with MAP_POPULATE, which reads a cold file in one sequential
// sweep (what a board's SD card does best) instead of a fault per page. If
// the file shrinks while mapped (not by perch, which holds the lock), the
// fault becomes a panic that the walk recovers (run sets
// debug.SetPanicOnFault). When neither works, the walk reads with pread.
func loadFile(f *os.File, size int64) (io.ReaderAt, func()) {
	if size <= 0 || int64(int(size)) != size {
		return f, func() {}
	}
	if size <= readAllMax {
		buf := make([]byte, size)
		if n, _ := f.ReadAt(buf, 0); int64(n) == size {
			return &fileBytes{data: buf}, func() {}
		}
		return f, func() {}
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return f, func() {}
	}
	return &fileBytes{data: data}, func() { syscall.Munmap(data) }
}

// inUse is how much of a file of size bytes the walk at open can read: up
// to the larger high water mark of the two meta pages. bbolt grows a file
// ahead of its use (doubling, then in steps of up to 16 MB), so the tail is
// often half the file; mapping and unmapping it cost as much again as the
// part in use (2 MB file, 1.1 MB in use: ~0.2 ms of a 5 ms start). The
// walk of the newest meta reads nothing at or above its own mark, and a mark
// past the end of the file is the walk's to report, so the whole file is
// loaded then, as it is when no meta page can be read.
func inUse(f *os.File, size int64) int64 {
	metas, _ := readMetas(f, size)
	if len(metas) == 0 {
		return size
	}
	var n int64
	for _, m := range metas {
		end := int64(m.pgid) * int64(m.pageSize)
		if m.pgid < 2 || m.pgid > uint64(size) || end > size {
			return size
		}
		n = max(n, end)
	}
	return n
}

func (m *fileBytes) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// slice returns n bytes at off without copying (read-only when mapped), or
// false when they are not all there.
func (m *fileBytes) slice(off, n int64) ([]byte, bool) {
	if off < 0 || n < 0 || off > int64(len(m.data)) || n > int64(len(m.data))-off {
		return nil, false
	}
	return m.data[off : off+n : off+n], true
}
