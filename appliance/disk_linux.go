package appliance

import "syscall"

// diskSpace reports the space of the file system holding path.
func diskSpace(path string) (Disk, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return Disk{}, err
	}
	bs := uint64(st.Bsize)
	return Disk{Path: path, FreeBytes: st.Bavail * bs, TotalBytes: st.Blocks * bs}, nil
}
