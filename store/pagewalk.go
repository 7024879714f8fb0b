package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/bits"
	"runtime/debug"
)

// This file reads a bbolt file without bbolt. bbolt trusts its file: at open
// it walks every reachable page (it rebuilds the freelist that way, unless
// the store wrote one at a clean close), in a goroutine of its own and through a
// memory map, so one damaged page or a truncated file ends the process with a
// panic or a fault nobody can recover. The walker below reads pages with
// pread, checks every offset and length before using it, and turns damage
// into a list of problems: the store runs it before handing a file to bbolt,
// and salvage uses it to copy out what is still readable.
//
// The layout mirrors go.etcd.io/bbolt/internal/common (v1.5.0, file format
// version 2): a 16-byte page header (id u64, flags u16, count u16, overflow
// u32), 16-byte branch elements (pos u32, ksize u32, pgid u64), 16-byte leaf
// elements (flags u32, pos u32, ksize u32, vsize u32) whose pos is relative
// to the element itself, and a 64-byte meta after the header of pages 0 and
// 1, checksummed with FNV-64a. bbolt writes it in the machine's byte order.

var ne = binary.NativeEndian

const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	elemSize       = 16
	metaSize       = 64
	bucketHdrSize  = 16

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10

	leafFlagBucket = 0x01

	noFreelist = ^uint64(0)

	// maxWalkDepth bounds page and bucket nesting: a healthy file of this
	// store is a few levels deep; a deeper one is a loop in disguise.
	maxWalkDepth = 64
	// maxProblems bounds the problems a walk keeps (it counts the rest).
	maxProblems = 50
	// maxValueBytes bounds one page with its overflow: no record of this
	// store comes near 64 MiB, so a larger overflow count is damage, and
	// reading it would cost that much memory.
	maxValueBytes = 64 << 20
)

// boltMeta is one decoded meta page.
type boltMeta struct {
	index    int // 0 or 1
	pageSize uint32
	root     uint64 // the root bucket's root page
	freelist uint64
	pgid     uint64 // high water mark: pages [0, pgid) are in use or free
	txid     uint64
}

// readMeta decodes the meta page at off, checking magic, version and
// checksum the way bbolt does.
func readMeta(r io.ReaderAt, off int64, index int) (boltMeta, error) {
	var b [pageHeaderSize + metaSize]byte
	if n, err := r.ReadAt(b[:], off); n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return boltMeta{}, fmt.Errorf("meta page %d unreadable: %w", index, err)
	}
	m := b[pageHeaderSize:]
	if ne.Uint32(m[0:]) != boltMagic {
		return boltMeta{}, fmt.Errorf("meta page %d: not a bbolt meta page (bad magic)", index)
	}
	if v := ne.Uint32(m[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("meta page %d: file format version %d, want %d", index, v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != ne.Uint64(m[56:]) {
		return boltMeta{}, fmt.Errorf("meta page %d: checksum mismatch", index)
	}
	return boltMeta{
		index:    index,
		pageSize: ne.Uint32(m[8:]),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		pgid:     ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}, nil
}

// readMetas returns the valid meta pages, newest transaction first, and what
// is wrong with the others. Page 1 sits one page size in; when page 0 cannot
// say how large a page is, every power of two bbolt could have used is tried.
func readMetas(r io.ReaderAt, size int64) ([]boltMeta, []string) {
	var metas []boltMeta
	var problems []string
	m0, err := readMeta(r, 0, 0)
	if err == nil {
		if err = validPageSize(m0.pageSize); err == nil {
			metas = append(metas, m0)
		}
	}
	if err != nil {
		problems = append(problems, err.Error())
	}
	var m1 boltMeta
	var err1 error = errors.New("meta page 1 not found")
	if len(metas) == 1 {
		m1, err1 = readMeta(r, int64(m0.pageSize), 1)
	} else {
		for ps := int64(1024); ps <= 1<<24 && ps < size; ps <<= 1 {
			if m, e := readMeta(r, ps, 1); e == nil && int64(m.pageSize) == ps {
				m1, err1 = m, nil
				break
			}
		}
	}
	if err1 == nil {
		if len(metas) == 1 && m1.pageSize != m0.pageSize {
			err1 = fmt.Errorf("meta page 1: page size %d differs from meta page 0's %d", m1.pageSize, m0.pageSize)
		} else {
			metas = append(metas, m1)
		}
	}
	if err1 != nil {
		problems = append(problems, err1.Error())
	}
	if len(metas) == 2 && metas[1].txid > metas[0].txid {
		metas[0], metas[1] = metas[1], metas[0]
	}
	return metas, problems
}

func validPageSize(ps uint32) error {
	if ps < 512 || ps > 1<<24 || bits.OnesCount32(ps) != 1 {
		return fmt.Errorf("meta page: implausible page size %d", ps)
	}
	return nil
}

// walkVisitor receives what a walk finds. Slices are valid only during the
// call. path is the chain of bucket names from the top (empty for the root
// bucket's own entries).
type walkVisitor interface {
	// bucket is called for a nested bucket named name inside path; it
	// returns whether to walk into it.
	bucket(path [][]byte, name []byte, seq uint64) bool
	// bucketEnd is called after a bucket's walk with the number of
	// problems met inside it.
	bucketEnd(path [][]byte, name []byte, problems int)
	// kv is called for each plain key/value of the bucket at path.
	kv(path [][]byte, k, v []byte)
}

// walker walks one meta's tree.
type walker struct {
	r        io.ReaderAt
	size     int64
	pageSize int
	meta     boltMeta
	visit    walkVisitor
	// stopEarly ends the walk at the first problem (the check at open
	// only needs to know whether the file is sound).
	stopEarly bool

	seen      []uint64 // bitset of pages already reached
	reached   uint64   // pages reached, overflow included
	free      []uint64 // the ids a synced freelist page lists
	problems  []string
	nProblems int
	// bucketProblems counts the problems met inside each bucket being
	// walked, innermost last.
	bucketProblems []int
	path           [][]byte
	bufs           [][]byte // one page buffer per depth
}

func newWalker(r io.ReaderAt, size int64, m boltMeta, v walkVisitor) *walker {
	return &walker{
		r: r, size: size, pageSize: int(m.pageSize), meta: m, visit: v,
		seen: make([]uint64, (m.pgid+63)/64),
	}
}

func (w *walker) problem(format string, a ...any) {
	w.nProblems++
	for i := range w.bucketProblems {
		w.bucketProblems[i]++
	}
	if len(w.problems) < maxProblems {
		w.problems = append(w.problems, fmt.Sprintf(format, a...))
	}
}

func (w *walker) stopped() bool { return w.stopEarly && w.nProblems > 0 }

// run walks the whole tree from the meta. A panic in the walker (a bug: it
// checks every bound) is reported as a problem rather than ending the
// process.
func (w *walker) run() {
	old := debug.SetPanicOnFault(true) // see fileBytes
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			w.problem("internal error while reading the file: %v", r)
		}
	}()
	m := w.meta
	if m.pgid < 2 {
		w.problem("meta page %d: high water mark %d below the two meta pages", m.index, m.pgid)
		return
	}
	if need := int64(m.pgid) * int64(m.pageSize); need > w.size || need/int64(m.pageSize) != int64(m.pgid) {
		// Go on (unless stopping early): the pages that are left can
		// still be salvaged.
		w.problem("file is truncated: %d bytes, but meta page %d counts %d pages of %d bytes (%d bytes)", w.size, m.index, m.pgid, m.pageSize, need)
		if w.stopped() {
			return
		}
	}
	w.markSeen(0, 1)
	if m.freelist != noFreelist {
		w.checkFreelist(m.freelist)
		if w.stopped() {
			return
		}
	}
	w.walkPage(m.root, 0, nil, nil)
	if m.freelist != noFreelist && !w.stopped() {
		w.checkFreeUnused(m.freelist)
	}
}

func (w *walker) markSeen(id, overflow uint64) bool {
	for p := id; p <= id+overflow; p++ {
		if w.seen[p/64]&(1<<(p%64)) != 0 {
			return false
		}
	}
	for p := id; p <= id+overflow; p++ {
		w.seen[p/64] |= 1 << (p % 64)
	}
	w.reached += overflow + 1
	return true
}

// readPage reads page id with its overflow pages into the buffer of depth,
// after checking that they lie inside the file and were not reached before.
func (w *walker) readPage(id uint64, depth int) ([]byte, bool) {
	if id < 2 || id >= w.meta.pgid {
		w.problem("page %d: out of range [2, %d)", id, w.meta.pgid)
		return nil, false
	}
	off := int64(id) * int64(w.pageSize)
	m, mapped := w.r.(*fileBytes)
	var buf []byte
	if mapped {
		// No copy: the walk then touches only the bytes it checks
		// (headers, element tables, keys), as bbolt's walk does.
		var ok bool
		if buf, ok = m.slice(off, int64(w.pageSize)); !ok {
			w.problem("page %d: past the end of the file", id)
			return nil, false
		}
	} else {
		for len(w.bufs) <= depth {
			w.bufs = append(w.bufs, make([]byte, w.pageSize))
		}
		buf = w.bufs[depth][:w.pageSize]
		if n, err := w.r.ReadAt(buf, off); n < len(buf) {
			w.problem("page %d: unreadable: %v", id, err)
			return nil, false
		}
	}
	overflow := uint64(ne.Uint32(buf[12:]))
	if id+overflow >= w.meta.pgid {
		w.problem("page %d: %d overflow pages run past the high water mark %d", id, overflow, w.meta.pgid)
		return nil, false
	}
	total := (overflow + 1) * uint64(w.pageSize)
	if total > maxValueBytes {
		w.problem("page %d: %d overflow pages (%d bytes) is implausibly large", id, overflow, total)
		return nil, false
	}
	if !w.markSeen(id, overflow) {
		w.problem("page %d: reached twice (two parents share it, or the tree loops)", id)
		return nil, false
	}
	if overflow > 0 && mapped {
		var ok bool
		if buf, ok = m.slice(off, int64(total)); !ok {
			w.problem("page %d: overflow past the end of the file", id)
			return nil, false
		}
	} else if overflow > 0 {
		if uint64(cap(w.bufs[depth])) < total {
			nb := make([]byte, total)
			copy(nb, buf)
			w.bufs[depth] = nb
		}
		buf = w.bufs[depth][:total]
		if n, err := w.r.ReadAt(buf[w.pageSize:], off+int64(w.pageSize)); n < len(buf)-w.pageSize {
			w.problem("page %d: overflow unreadable: %v", id, err)
			return nil, false
		}
	}
	if got := ne.Uint64(buf[0:]); got != id {
		w.problem("page %d: header names page %d", id, got)
		return nil, false
	}
	return buf, true
}

// elem returns the key (and for leaves the value and flags) of element i of
// page p, checking every bound.
func elemAt(p []byte, i int, leaf bool) (flags uint32, k, v []byte, child uint64, err error) {
	at := pageHeaderSize + i*elemSize
	if at+elemSize > len(p) {
		return 0, nil, nil, 0, fmt.Errorf("element %d lies past the page", i)
	}
	e := p[at : at+elemSize]
	pos := uint64(ne.Uint32(e[4:]))
	if !leaf {
		pos = uint64(ne.Uint32(e[0:]))
	}
	ksize := uint64(ne.Uint32(e[8:]))
	var vsize uint64
	if leaf {
		flags = ne.Uint32(e[0:])
		vsize = uint64(ne.Uint32(e[12:]))
	} else {
		child = ne.Uint64(e[8:])
		ksize = uint64(ne.Uint32(e[4:]))
	}
	start := uint64(at) + pos
	if start+ksize+vsize > uint64(len(p)) {
		return 0, nil, nil, 0, fmt.Errorf("element %d: key or value lies past the page", i)
	}
	k = p[start : start+ksize]
	v = p[start+ksize : start+ksize+vsize]
	return flags, k, v, child, nil
}

// walkPage walks the subtree at page id; lo and hi bound its keys (from the
// parent branch: lo <= key < hi; nil is unbounded).
func (w *walker) walkPage(id uint64, depth int, lo, hi []byte) {
	if w.stopped() {
		return
	}
	if depth > maxWalkDepth {
		w.problem("page %d: nested deeper than %d levels", id, maxWalkDepth)
		return
	}
	p, ok := w.readPage(id, depth)
	if !ok {
		return
	}
	w.walkNode(id, p, depth, lo, hi)
}

// walkNode checks and walks a page already in memory (a page of the file, or
// an inline bucket's page inside a value).
func (w *walker) walkNode(id uint64, p []byte, depth int, lo, hi []byte) {
	if len(p) < pageHeaderSize {
		w.problem("page %d: shorter than a page header", id)
		return
	}
	flags := ne.Uint16(p[8:])
	count := int(ne.Uint16(p[10:]))
	switch flags {
	case flagBranch:
		if count == 0 {
			w.problem("page %d: empty branch page", id)
			return
		}
		var prev []byte
		for i := 0; i < count && !w.stopped(); i++ {
			_, k, _, child, err := elemAt(p, i, false)
			if err != nil {
				w.problem("page %d (branch): %v", id, err)
				return
			}
			w.ordered(id, i, count, prev, k, lo, hi)
			next := hi
			if i+1 < count {
				if _, nk, _, _, err := elemAt(p, i+1, false); err == nil {
					next = nk
				}
			}
			w.walkPage(child, depth+1, k, next)
			prev = k
		}
	case flagLeaf:
		var prev []byte
		for i := 0; i < count && !w.stopped(); i++ {
			ef, k, v, _, err := elemAt(p, i, true)
			if err != nil {
				w.problem("page %d (leaf): %v", id, err)
				return
			}
			w.ordered(id, i, count, prev, k, lo, hi)
			prev = k
			if ef&^leafFlagBucket != 0 {
				w.problem("page %d: element %d has unknown flags %#x", id, i, ef)
				continue
			}
			if ef&leafFlagBucket == 0 {
				w.visit.kv(w.path, k, v)
				continue
			}
			w.walkBucket(id, k, v, depth)
		}
	default:
		w.problem("page %d: not a branch or leaf page (flags %#x)", id, flags)
	}
}

// ordered checks that key k (element i of count) follows prev and lies in
// [lo, hi), as bbolt's own check does. Keys out of order are damage (bbolt's
// searches go wrong) but no danger to the walk, which goes on: salvage
// copies those records too. Only the first key is compared with lo and the
// last with hi: keys that rise from one to the other all lie between, and
// a key that does not rise is reported as out of order. That is a third of
// the comparisons, the largest part of the walk at every start.
func (w *walker) ordered(id uint64, i, count int, prev, k, lo, hi []byte) {
	switch {
	case prev != nil && bytes.Compare(prev, k) >= 0:
		w.problem("page %d: keys out of order at element %d", id, i)
	case i == 0 && lo != nil && bytes.Compare(k, lo) < 0, i == count-1 && hi != nil && bytes.Compare(k, hi) >= 0:
		w.problem("page %d: element %d's key lies outside its parent's range", id, i)
	}
}

// walkBucket walks the nested bucket whose header is v.
func (w *walker) walkBucket(id uint64, name, v []byte, depth int) {
	if len(v) < bucketHdrSize {
		w.problem("page %d: bucket %q has a %d-byte header", id, name, len(v))
		return
	}
	root, seq := ne.Uint64(v[0:]), ne.Uint64(v[8:])
	if !w.visit.bucket(w.path, name, seq) {
		return
	}
	w.path = append(w.path, name)
	w.bucketProblems = append(w.bucketProblems, 0)
	if root == 0 {
		// An inline bucket: its single leaf page is the rest of the value.
		inline := v[bucketHdrSize:]
		if len(inline) >= pageHeaderSize && ne.Uint16(inline[8:]) != flagLeaf {
			w.problem("page %d: inline bucket %q is not a leaf (flags %#x)", id, name, ne.Uint16(inline[8:]))
		} else {
			w.walkNode(id, inline, depth+1, nil, nil)
		}
	} else {
		w.walkPage(root, depth+1, nil, nil)
	}
	w.path = w.path[:len(w.path)-1]
	n := w.bucketProblems[len(w.bucketProblems)-1]
	w.bucketProblems = w.bucketProblems[:len(w.bucketProblems)-1]
	w.visit.bucketEnd(w.path, name, n)
}

// checkFreelist checks a synced freelist page (the store writes one at a
// clean close, see DB.writeFreelist; a file written by another bbolt program
// may have one too) and keeps the ids it lists for checkFreeUnused.
func (w *walker) checkFreelist(id uint64) {
	if id < 2 || id >= w.meta.pgid {
		w.problem("freelist page %d: out of range [2, %d)", id, w.meta.pgid)
		return
	}
	p, ok := w.readPage(id, 0)
	if !ok {
		return
	}
	if f := ne.Uint16(p[8:]); f != flagFreelist {
		w.problem("freelist page %d: flags %#x", id, f)
		return
	}
	count := uint64(ne.Uint16(p[10:]))
	ids := p[pageHeaderSize:]
	if count == 0xFFFF {
		if len(ids) < 8 {
			w.problem("freelist page %d: too short", id)
			return
		}
		count = ne.Uint64(ids)
		ids = ids[8:]
	}
	if count > uint64(len(ids))/8 {
		w.problem("freelist page %d: %d ids do not fit", id, count)
		return
	}
	free := make([]uint64, count)
	for i := range free {
		f := ne.Uint64(ids[i*8:])
		if f < 2 || f >= w.meta.pgid {
			w.problem("freelist page %d: free page %d out of range", id, f)
			return
		}
		free[i] = f
	}
	w.free = free
}

// checkFreeUnused checks, after the walk, that no page the freelist lists
// is in the tree or listed twice: bbolt trusts the list and would hand such
// a page out again, overwriting what the tree keeps there.
func (w *walker) checkFreeUnused(listedBy uint64) {
	for _, id := range w.free {
		bit := uint64(1) << (id % 64)
		if w.seen[id/64]&bit != 0 {
			w.problem("freelist page %d: page %d is listed as free but is in use (or listed twice)", listedBy, id)
			if w.stopped() {
				return
			}
			continue
		}
		w.seen[id/64] |= bit
	}
}
