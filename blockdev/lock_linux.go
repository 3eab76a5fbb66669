package blockdev

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ext4io/ext4io/blockdev/internal/devutil"
)

var (
	_ Locker = (*File)(nil)
	_ Locker = (*Direct)(nil)
	_ Locker = (*Mmap)(nil)
)

// Lock implements Locker: flock(LOCK_EX|LOCK_NB), then the mount check.
// (Writable opens of block devices are also O_EXCL: see exclFlag.)
func (c *fileCore) Lock() error {
	if c.closed.Load() {
		return devutil.Closed("blockdev", c.path)
	}
	return lockFile(c.f, c.path)
}

// Unlock implements Locker.
func (c *fileCore) Unlock() error { return unlockFile(c.f) }

func (c *fileCore) fileID() (fileID, bool) { return statID(c.f) }

// Lock implements Locker, as File's.
func (m *Mmap) Lock() error {
	m.life.RLock(0)
	defer m.life.RUnlock(0)
	if m.life.closed {
		return devutil.Closed("blockdev", m.path)
	}
	return lockFile(m.f, m.path)
}

// Unlock implements Locker.
func (m *Mmap) Unlock() error { return unlockFile(m.f) }

func (m *Mmap) fileID() (fileID, bool) { return statID(m.f) }

func statID(f *os.File) (fileID, bool) {
	var st unix.Stat_t
	if err := control(f, func(fd int) error { return unix.Fstat(fd, &st) }); err != nil {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, true
}

func lockFile(f *os.File, path string) error {
	err := control(f, func(fd int) error {
		return ignoringEINTR(func() error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
	})
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("blockdev: %s: another writer has it open: %w", path, ErrBusy)
	}
	if err != nil {
		return fmt.Errorf("blockdev: flock %s: %w: %w", path, ErrIO, err)
	}
	var st unix.Stat_t
	if err := control(f, func(fd int) error { return unix.Fstat(fd, &st) }); err != nil {
		unlockFile(f)
		return fmt.Errorf("blockdev: stat %s: %w: %w", path, ErrIO, err)
	}
	if where, ok := mountedAt(&st); ok {
		unlockFile(f)
		return fmt.Errorf("blockdev: %s is mounted on %s: %w", path, where, ErrBusy)
	}
	return nil
}

func unlockFile(f *os.File) error {
	return control(f, func(fd int) error {
		return ignoringEINTR(func() error { return unix.Flock(fd, unix.LOCK_UN) })
	})
}

// exclFlag returns O_EXCL for a writable open of a block device: Linux
// then refuses the open (EBUSY) while the device is mounted or another
// program holds it exclusively, as mkfs.ext4 and mount rely on.
func exclFlag(path string, readOnly bool) int {
	if readOnly {
		return 0
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return 0
	}
	return unix.O_EXCL
}

// busyErr turns the EBUSY of an O_EXCL open of a block device into an
// error wrapping ErrBusy that names the mount point, if there is one.
func busyErr(path string, err error) error {
	if !errors.Is(err, unix.EBUSY) {
		return nil
	}
	var st unix.Stat_t
	if unix.Stat(path, &st) == nil {
		if where, ok := mountedAt(&st); ok {
			return fmt.Errorf("blockdev: %s is mounted on %s: %w", path, where, ErrBusy)
		}
	}
	return fmt.Errorf("blockdev: %s is in use (mounted or held exclusively by another program): %w", path, ErrBusy)
}

// mountedAt reports where Linux has the file or block device st mounted,
// as e2fsprogs' check_mount does: a mount whose source is the block device
// itself, or, for a regular file, a loop device whose backing file is it
// (same dev and ino). It reads /proc/self/mounts and sysfs; when they
// cannot be read it reports nothing.
func mountedAt(st *unix.Stat_t) (string, bool) {
	mf, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", false
	}
	defer mf.Close()
	blk := st.Mode&unix.S_IFMT == unix.S_IFBLK
	reg := st.Mode&unix.S_IFMT == unix.S_IFREG
	sc := bufio.NewScanner(mf)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.HasPrefix(fields[0], "/") {
			continue
		}
		src, dir := unescapeMount(fields[0]), unescapeMount(fields[1])
		var sst unix.Stat_t
		if unix.Stat(src, &sst) != nil || sst.Mode&unix.S_IFMT != unix.S_IFBLK {
			continue
		}
		if blk && sst.Rdev == st.Rdev {
			return dir, true
		}
		if reg {
			backing := filepath.Join("/sys/dev/block", strconv.FormatUint(uint64(unix.Major(sst.Rdev)), 10)+":"+
				strconv.FormatUint(uint64(unix.Minor(sst.Rdev)), 10), "loop/backing_file")
			b, err := os.ReadFile(backing)
			if err != nil {
				continue
			}
			var bst unix.Stat_t
			if unix.Stat(strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"), &bst) == nil &&
				bst.Dev == st.Dev && bst.Ino == st.Ino {
				return dir + " (through " + src + ")", true
			}
		}
	}
	return "", false
}

// unescapeMount undoes the octal escapes (\040 for a space) of
// /proc/mounts fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
