//go:build !unix

package ext4io

// The host has no O_DIRECTORY or O_NOFOLLOW for os.OpenFile's flags to
// carry.
const (
	oDirectory = 0
	oNoFollow  = 0
)
