package store

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The marker file beside the database (markerPath) says whether the last
// writer closed it cleanly: it starts with "0" after a clean close. Anything
// else means it did not, and the next open decodes every record: "1", which
// a writer keeps there while it has the file open, or the empty file that
// earlier versions created at open and removed at a clean close. No file at
// all is a clean close of such a version.
//
// The byte is rewritten in place instead of the file being created at every
// open and removed at every close: creating a file is a new inode and
// directory entry through the file system's journal, which took ~0.1 ms of
// every start, and on an SD card it is two more metadata writes per start
// and stop.
//
// After the "0", a clean close records the file as it left it (closeRecord):
// an open that finds the file exactly so skips the walk, which checked the
// file the last time it was opened, and everything written since went
// through bbolt's own transactions.
const (
	markerClean = '0'
	markerOpen  = '1'
)

// readMarker opens the marker for writing when it exists, and says whether
// it records an unclean stop, and what a clean close recorded (nil when it
// recorded nothing). A marker that exists but cannot be opened for writing
// is read as it can be; writeOpen then reports the error.
func readMarker(path string) (mk *os.File, unclean bool, rec *closeRecord) {
	mk, err := os.OpenFile(markerPath(path), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, markerUnclean(path), nil
	}
	var b [256]byte
	n, _ := mk.ReadAt(b[:], 0)
	if n < 1 || b[0] != markerClean {
		return mk, true, nil
	}
	return mk, false, parseCloseRecord(string(b[:n]))
}

// markerUnclean reads the marker without writing it (`perch db check`).
func markerUnclean(path string) bool {
	f, err := os.Open(markerPath(path))
	if err != nil {
		return false
	}
	defer f.Close()
	return !holdsClean(f)
}

func holdsClean(f *os.File) bool {
	var b [1]byte
	n, _ := f.ReadAt(b[:], 0)
	return n == 1 && b[0] == markerClean
}

// writeOpen records in the marker (creating it when mk is nil) that a
// writer has the database open.
func writeOpen(path string, mk *os.File) (*os.File, error) {
	if mk == nil {
		var err error
		if mk, err = os.OpenFile(markerPath(path), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			return nil, err
		}
	}
	if err := writeMarker(mk, markerOpen); err != nil {
		mk.Close()
		return nil, err
	}
	return mk, nil
}

// restoreMarker puts back what the marker said before an open that failed
// after writeOpen, and closes it. What a clean close recorded is dropped:
// the failed open may have been the first to find something wrong.
func restoreMarker(mk *os.File, unclean bool) {
	if unclean {
		writeMarker(mk, markerOpen)
	} else {
		writeClean(mk, nil)
	}
	mk.Close()
}

func writeMarker(mk *os.File, state byte) error {
	_, err := mk.WriteAt([]byte{state}, 0)
	return err
}

// writeClean records a clean close, with rec when there is one.
func writeClean(mk *os.File, rec *closeRecord) error {
	line := string(markerClean)
	if rec != nil {
		line = rec.encode()
	}
	if _, err := mk.WriteAt([]byte(line), 0); err != nil {
		return err
	}
	return mk.Truncate(int64(len(line)))
}

// closeRecord is what a clean close knows of the file it leaves: what the
// file system says of it (device, inode, size, the times of the last write
// and of the last change of any kind, which no one can set back), the
// newest transaction, and what the walk at open would otherwise count.
type closeRecord struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
	txid         uint64
	sessions     int64
	pages, free  uint64 // high water mark, and the free pages below it
}

// closeRecordVersion leads the record, so a later format is not misread.
const closeRecordVersion = "v1"

func (r *closeRecord) encode() string {
	f := []string{string(markerClean), closeRecordVersion}
	for _, n := range []uint64{r.dev, r.ino, uint64(r.size), uint64(r.mtime), uint64(r.ctime), r.txid, uint64(r.sessions), r.pages, r.free} {
		f = append(f, strconv.FormatUint(n, 10))
	}
	return strings.Join(f, " ") + "\n"
}

func parseCloseRecord(s string) *closeRecord {
	f := strings.Fields(s)
	if len(f) != 11 || f[0] != string(markerClean) || f[1] != closeRecordVersion {
		return nil
	}
	var n [9]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i+2], 10, 64)
		if err != nil {
			return nil
		}
		n[i] = v
	}
	return &closeRecord{dev: n[0], ino: n[1], size: int64(n[2]), mtime: int64(n[3]), ctime: int64(n[4]),
		txid: n[5], sessions: int64(n[6]), pages: n[7], free: n[8]}
}

// fileState fills the file system's part of a record from st.
func fileState(st os.FileInfo) (closeRecord, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return closeRecord{}, false
	}
	return closeRecord{dev: uint64(sys.Dev), ino: uint64(sys.Ino), size: st.Size(),
		mtime: sys.Mtim.Nano(), ctime: sys.Ctim.Nano()}, true
}

// unchanged reports whether st is the file the record describes, as its
// close left it.
func (r *closeRecord) unchanged(st os.FileInfo) bool {
	now, ok := fileState(st)
	return ok && now.dev == r.dev && now.ino == r.ino && now.size == r.size && now.mtime == r.mtime && now.ctime == r.ctime
}

// settleChangeTime waits until the clock that stamps changes to files has
// moved past ctime, so that a write to the file after the close changes its
// ctime even where stamps advance only at each timer tick (kernels before
// 6.13; every 4 or 10 ms on a Raspberry Pi): without the wait, bytes written
// over a page in the same tick as the close would leave the file looking
// as the close left it, and the next open would not walk it. False when the
// clock does not get there within a moment (it was set back): the close
// then records nothing.
func settleChangeTime(ctime int64) bool {
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
			return false
		}
		if ts.Nano() > ctime {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}
