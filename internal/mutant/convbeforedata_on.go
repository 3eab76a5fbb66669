//go:build ext4io_mutant_convbeforedata

package mutant

// ConvBeforeData: commit a direct write's conversion before writing its data (on: this is a deliberately broken build).
const ConvBeforeData = true
