//go:build ext4io_mutant_homebeforecommit

package mutant

// HomeBeforeCommit: write a transaction's blocks home before its commit block (on: this is a deliberately broken build).
const HomeBeforeCommit = true
