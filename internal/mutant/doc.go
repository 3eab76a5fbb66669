// Package mutant holds the switches of deliberate bugs ("mutants") that
// prove the crash torture (internal/torture) can see ordering bugs. Each
// switch is a constant, false unless its build tag is given, so the
// default build carries no trace of the bug: the guarded branches are
// dead code and the compiler drops them.
//
//	tag                              constant           bug
//	ext4io_mutant_nocommitflush      NoCommitFlush      no flush before the commit block
//	ext4io_mutant_nocheckpointflush  NoCheckpointFlush  no flush before the checkpoint moves the log tail
//	ext4io_mutant_homebeforecommit   HomeBeforeCommit   a transaction's blocks written home before its commit block
//	ext4io_mutant_ignorerevoke       IgnoreRevoke       replay ignores revoke records
//	ext4io_mutant_convbeforedata     ConvBeforeData     a direct write's unwritten->written conversion committed before its data is written
//
// internal/torture/mutants_test.go (TORTURE_MUTANTS=1) builds the torture
// test with each tag and checks that it fails.
package mutant

// Names lists the build tags of the mutants, in the table's order.
var Names = []string{
	"ext4io_mutant_nocommitflush",
	"ext4io_mutant_nocheckpointflush",
	"ext4io_mutant_homebeforecommit",
	"ext4io_mutant_ignorerevoke",
	"ext4io_mutant_convbeforedata",
}
