package fusefs_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io/fusefs"
)

// TestMountOrphanSetattr: fchmod, fchown and futimes of an open file whose name is
// gone change the orphan inode, as on ext4; writes and reads through the
// descriptor go on, and the last close frees it (e2fsck -fn clean).
func TestMountOrphanSetattr(t *testing.T) {
	needFUSE(t)
	img := newImage(t, 32<<20)
	m := mount(t, img, fusefs.Options{})
	p := filepath.Join(m.dir, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	check(t, err)
	check(t, os.Remove(p))
	check(t, f.Chmod(0o600))
	check(t, f.Chown(1000, 1001))
	check(t, unix.Futimes(int(f.Fd()), []unix.Timeval{{Sec: 1e9}, {Sec: 1e9 + 7}}))
	var st unix.Stat_t
	check(t, unix.Fstat(int(f.Fd()), &st))
	if st.Mode&0o7777 != 0o600 || st.Uid != 1000 || st.Gid != 1001 || st.Nlink != 0 || st.Mtim.Sec != 1e9+7 || st.Atim.Sec != 1e9 {
		t.Fatalf("after fchmod and fchown of the unlinked file: mode %o uid %d gid %d nlink %d", st.Mode, st.Uid, st.Gid, st.Nlink)
	}
	_, err = f.WriteAt([]byte("orphan"), 0)
	check(t, err)
	b := make([]byte, 6)
	_, err = f.ReadAt(b, 0)
	check(t, err)
	if string(b) != "orphan" {
		t.Fatalf("read %q", b)
	}
	check(t, f.Close())
	m.unmount()
	e2fsck(t, img)
}
