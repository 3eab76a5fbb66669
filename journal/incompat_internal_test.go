package journal

import "testing"

// TestIncompatNames: a refused journal feature is named, not only a hex
// number.
func TestIncompatNames(t *testing.T) {
	for bad, want := range map[uint32]string{
		FeatureIncompatFastCommit:        "fast commits (incompat 0x20)",
		0x40:                             "unknown incompat features 0x40",
		FeatureIncompatFastCommit | 0x80: "fast commits (incompat 0x20), unknown incompat features 0x80",
	} {
		if got := incompatNames(bad); got != want {
			t.Errorf("incompatNames(%#x) = %q, want %q", bad, got, want)
		}
	}
}
