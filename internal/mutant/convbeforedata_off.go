//go:build !ext4io_mutant_convbeforedata

package mutant

// ConvBeforeData: commit a direct write's conversion before writing its data (off; build with -tags ext4io_mutant_convbeforedata to switch it on).
const ConvBeforeData = false
