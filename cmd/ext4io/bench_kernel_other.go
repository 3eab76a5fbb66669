//go:build !linux

package main

import "context"

// fioJob is unused off Linux.
type fioJob struct{}

func runKernel(context.Context, *benchConfig, string, int64, []workloadResult, *progress) kernelInfo {
	return kernelInfo{Skipped: "the Linux ext4 column needs Linux (loop devices, mount, fio)"}
}
