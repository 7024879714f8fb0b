package store

import (
	"errors"
	"io/fs"
	"os"
)

// The marker file beside the database (markerPath) says whether the last
// writer closed it cleanly: it holds "0" after a clean close. Anything else
// means it did not, and the next open decodes every record: "1", which a
// writer keeps there while it has the file open, or the empty file that
// earlier versions created at open and removed at a clean close. No file at
// all is a clean close of such a version.
//
// The byte is rewritten in place instead of the file being created at every
// open and removed at every close: creating a file is a new inode and
// directory entry through the file system's journal, which took ~0.1 ms of
// every start, and on an SD card it is two more metadata writes per start
// and stop.
const (
	markerClean = '0'
	markerOpen  = '1'
)

// readMarker opens the marker for writing when it exists, and says whether
// it records an unclean stop. A marker that exists but cannot be opened for
// writing is read as it can be; writeOpen then reports the error.
func readMarker(path string) (mk *os.File, unclean bool) {
	mk, err := os.OpenFile(markerPath(path), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		return nil, markerUnclean(path)
	}
	return mk, !holdsClean(mk)
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
// after writeOpen, and closes it.
func restoreMarker(mk *os.File, unclean bool) {
	state := byte(markerClean)
	if unclean {
		state = markerOpen
	}
	writeMarker(mk, state)
	mk.Close()
}

func writeMarker(mk *os.File, state byte) error {
	_, err := mk.WriteAt([]byte{state}, 0)
	return err
}
