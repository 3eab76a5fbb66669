package bench

import "golang.org/x/sys/unix"

// freeBytes returns the bytes available to this user on dir's filesystem.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.F_bavail * int64(st.F_bsize), nil
}
