package layout

import "testing"

func TestDeviceNumberRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		major, minor uint32
		old          bool
	}{
		{1, 3, true}, {0, 0, true}, {255, 255, true}, {8, 256, false},
		{256, 0, false}, {4095, 0xfffff, false}, {259, 65536, false},
	} {
		var b [InodeBlockSize]byte
		PutDeviceNumber(&b, tc.major, tc.minor)
		if got := b[0] != 0 || b[1] != 0; got != tc.old && !(tc.major == 0 && tc.minor == 0) {
			t.Errorf("%d:%d: old encoding %v, want %v", tc.major, tc.minor, got, tc.old)
		}
		if ma, mi := DeviceNumber(&b); ma != tc.major || mi != tc.minor {
			t.Errorf("%d:%d: decoded %d:%d", tc.major, tc.minor, ma, mi)
		}
	}
	// Linux's new_encode_dev of 8:256 (sdq's... any minor >= 256).
	var b [InodeBlockSize]byte
	PutDeviceNumber(&b, 8, 0x123)
	if got := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24; got != 0x23|8<<8|0x100<<12 {
		t.Errorf("new encoding %#x", got)
	}
}
