//go:build !linux

package bench

import (
	"context"
	"errors"
)

// kernelEnv is never set up off Linux: startKernel says why.
type kernelEnv struct{}

func startKernel(context.Context, string, int64, bool) (*kernelEnv, KernelInfo) {
	return nil, KernelInfo{Skipped: "the Linux ext4 column needs Linux (loop devices, mount, fio)"}
}

func (*kernelEnv) run(context.Context, *config, workload, int) (*Measure, string, error) {
	return nil, "", errors.New("no Linux ext4 column off Linux")
}

func (*kernelEnv) teardown() {}

func (*kernelEnv) hasRun() bool { return false }

func (*kernelEnv) renew(context.Context) (*kernelEnv, error) {
	return nil, errors.New("no Linux ext4 column off Linux")
}
