//go:build unix

package blockdev_test

import "github.com/ext4io/ext4io/blockdev"

func init() {
	unixOpens["OpenMmap"] = func(p string) error { _, err := blockdev.OpenMmap(p, false); return err }
}
