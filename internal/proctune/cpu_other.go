//go:build !unix

package proctune

import "time"

// haveProcessCPU is false where getrusage is missing: Start does not tune.
const haveProcessCPU = false

func processCPU() time.Duration { return 0 }
