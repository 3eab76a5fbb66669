package ext4io_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/iomap"
)

// An engine drives ext4's own iomap ops: the overwrite ops first, under
// the shared lock, and the normal ops for what they refuse.
func ExampleFile_OverwriteOps() {
	dev := memdev.New(64 << 20)
	if err := ext4io.Format(dev, ext4io.FormatOptions{}); err != nil {
		log.Fatal(err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("data")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	write := func(kind ext4io.IomapKind, p []byte, off int64) error {
		l, err := f.LockIO(kind, off, int64(len(p)))
		if err != nil {
			return err
		}
		n, err := iomap.DirectWrite(dev, f.IomapOps(kind), p, off, &iomap.DioOptions{BlockSize: 4096})
		return l.Unlock(off, n, err)
	}
	buf := make([]byte, 8192)
	for range 2 {
		err := write(ext4io.IomapOverwrite, buf, 0)
		if errors.Is(err, iomap.ErrNeedNormal) {
			fmt.Println("overwrite ops: not mine, try normal")
			err = write(ext4io.IomapNormal, buf, 0)
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("wrote", len(buf), "bytes; size", f.Size())
	}
	// Output:
	// overwrite ops: not mine, try normal
	// wrote 8192 bytes; size 8192
	// wrote 8192 bytes; size 8192
}
