package ext4io_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/ext4iotest"
)

// adv22bShutdown stops mnt with EXT4_IOC_SHUTDOWN and
// EXT4_GOING_FLAGS_NOLOGFLUSH: the running transaction is not written,
// what the last commit holds survives.
func adv22bShutdown(t *testing.T, mnt string) {
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	flag := uint32(ext4GoingNoLogFlush)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ext4IocShutdown, uintptr(unsafe.Pointer(&flag)))
	if e != 0 {
		t.Skipf("EXT4_IOC_SHUTDOWN: %v", e)
	}
}

// adv22bOrphanCrash makes a crash image with Linux: inodes of every kind
// unlinked while open (a file with data, a directory, a fifo, a symlink
// and a device held by O_PATH), committed by an fsync, then the
// filesystem shut down before the closes free them.
func adv22bOrphanCrash(t *testing.T, feat string) string {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "32M", "-O", feat)
	mnt := ext4iotest.Mount(t, img, false)
	p := func(s string) string { return filepath.Join(mnt, s) }
	var fds []int
	hold := func(path string, flags int) {
		fd, err := unix.Open(path, flags, 0)
		require.NoError(t, err)
		fds = append(fds, fd)
	}
	require.NoError(t, os.WriteFile(p("keep"), make([]byte, 100<<10), 0o644))
	for i, name := range []string{"f1", "f2", "f3"} {
		require.NoError(t, os.WriteFile(p(name), make([]byte, (i+1)*300<<10), 0o644))
		hold(p(name), unix.O_RDONLY)
	}
	require.NoError(t, os.MkdirAll(p("d/sub"), 0o755))
	hold(p("d/sub"), unix.O_RDONLY|unix.O_DIRECTORY)
	require.NoError(t, unix.Mkfifo(p("fifo"), 0o644))
	hold(p("fifo"), unix.O_RDWR)
	require.NoError(t, os.Symlink("/some/where/far/away/to/make/it/long/enough/for/a/block/"+string(make([]byte, 0))+"x", p("sl")))
	hold(p("sl"), unix.O_PATH|unix.O_NOFOLLOW)
	require.NoError(t, unix.Mknod(p("dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	hold(p("dev"), unix.O_PATH)
	for _, name := range []string{"f1", "f2", "f3", "fifo", "sl", "dev"} {
		require.NoError(t, os.Remove(p(name)))
	}
	require.NoError(t, os.Remove(p("d/sub")))
	kf, err := os.OpenFile(p("keep"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = kf.WriteAt([]byte("x"), 0)
	require.NoError(t, err)
	require.NoError(t, kf.Sync()) // commits the orphan list
	adv22bShutdown(t, mnt)
	require.NoError(t, kf.Close())
	for _, fd := range fds {
		unix.Close(fd)
	}
	ext4iotest.Unmount(t, mnt)
	return img
}

// TestAdv22bLinuxOrphanCrash: crash images Linux made with orphans of every
// kind, on the orphan file and on the s_last_orphan chain, open writable;
// the orphans are freed and e2fsck finds the image clean.
func TestAdv22bLinuxOrphanCrash(t *testing.T) {
	for _, feat := range []string{"orphan_file", "^orphan_file"} {
		t.Run(feat, func(t *testing.T) {
			img := adv22bOrphanCrash(t, feat)
			adv22bRequireOrphans(t, img, feat == "orphan_file")
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			adv22bWalkAll(t, v)
			require.NoError(t, v.Close())
			ext4iotest.Fsck(t, img)
		})
	}
}

func adv22bExec(name string, args ...string) (string, error) {
	b, err := exec.Command(name, args...).CombinedOutput()
	return string(b), err
}

func adv22bGrep(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(strings.ToLower(l), w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// adv22bTruncateCrash makes a crash image with Linux whose orphan list
// holds a linked regular file in the middle of a truncate: a file of
// thousands of extents is cut while an fsync of another file commits the
// transaction holding the truncate's orphan entry, then the filesystem is
// shut down before the truncate ends.
func adv22bTruncateCrash(t *testing.T, feat string, delay time.Duration) string {
	img := filepath.Join(t.TempDir(), "img")
	ext4iotest.Mkfs(t, img, "128M", "-b", "1024", "-O", feat)
	mnt := ext4iotest.Mount(t, img, false)
	big, err := os.OpenFile(filepath.Join(mnt, "big"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	fd := int(big.Fd())
	require.NoError(t, unix.Fallocate(fd, 0, 0, 32<<20))
	for off := int64(0); off < 32<<20; off += 2048 {
		require.NoError(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, 1024))
	}
	require.NoError(t, big.Sync())
	other, err := os.Create(filepath.Join(mnt, "other"))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = big.Truncate(4096) // EROFS once shut down
	}()
	time.Sleep(delay)
	_, err = other.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, other.Sync())
	adv22bShutdown(t, mnt)
	<-done
	require.NoError(t, big.Close())
	require.NoError(t, other.Close())
	ext4iotest.Unmount(t, mnt)
	return img
}

// TestAdv22bLinuxTruncateCrash: a crash image with a truncate in
// progress (a linked file on the orphan list) opens writable, the file is
// cut to its size and e2fsck finds the image clean.
func TestAdv22bLinuxTruncateCrash(t *testing.T) {
	for _, feat := range []string{"orphan_file", "^orphan_file"} {
		t.Run(feat, func(t *testing.T) {
			img := adv22bTruncateCrash(t, feat, time.Millisecond)
			adv22bRequireOrphans(t, img, feat == "orphan_file")
			v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
			require.NoError(t, err)
			fi, err := v.Stat("big")
			require.NoError(t, err)
			t.Logf("big: size %d", fi.Size())
			require.NoError(t, v.Close())
			ext4iotest.Fsck(t, img)
		})
	}
}

// adv22bRequireOrphans replays the journal of a copy of img with e2fsck and,
// with the orphan file, fails t unless the replayed superblock says
// orphan_present: the crash image is the one the test means to make.
// e2fsck empties an s_last_orphan chain as it replays, so the chain's
// images are not checked.
func adv22bRequireOrphans(t *testing.T, img string, orphanFile bool) {
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	c := filepath.Join(t.TempDir(), "replayed")
	require.NoError(t, os.WriteFile(c, b, 0o644))
	out, err := adv22bExec(ext4iotest.Tool(t, "e2fsck"), "-E", "journal_only", "-y", c)
	require.NoError(t, err, out)
	out, err = adv22bExec(ext4iotest.Tool(t, "debugfs"), "-R", "stats", c)
	require.NoError(t, err, out)
	orphans := adv22bGrep(out, "orphan_present", "first orphan inode")
	t.Logf("after replay: %s", orphans)
	if orphanFile {
		require.Contains(t, orphans, "orphan_present", "the crash image has no orphans")
	}
}
