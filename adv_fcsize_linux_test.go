package ext4io_test

import (
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
)

func init() {
	fcCrossCheck = func(t *testing.T, img *memdev.Device, want map[string][]byte) {
		t.Helper()
		fcCheckCrashImage(t, t.TempDir(), ext4iotest.ImageOf(t, img), want)
	}
}
