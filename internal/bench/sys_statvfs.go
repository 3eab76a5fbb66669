//go:build netbsd || solaris

package bench

import "golang.org/x/sys/unix"

// freeBytes returns the bytes available to this user on dir's filesystem.
func freeBytes(dir string) (int64, error) {
	var st unix.Statvfs_t
	if err := unix.Statvfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Frsize), nil
}
