package runtimetune

import (
	"errors"
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryRatio is the share of the cgroup's memory limit given to the Go
// runtime. The rest is for what the runtime does not count but the cgroup
// does: the executable's pages and other file-backed memory, and C
// allocations.
const memoryRatio = 0.9

// The sources of a memoryLimit, as logged.
const (
	// sourceGOMEMLIMIT: the GOMEMLIMIT environment variable, which the Go
	// runtime applied itself before main; left alone.
	sourceGOMEMLIMIT = "GOMEMLIMIT"
	// sourceFlag: an explicit --memory-limit size.
	sourceFlag = "flag"
	// sourceCgroup: memoryRatio of the cgroup's memory limit.
	sourceCgroup = "cgroup"
	// sourceNone: no limit (no cgroup limit, or --memory-limit off).
	sourceNone = "none"
)

// memoryLimit is the Go memory limit in effect and where it came from.
type memoryLimit struct {
	// Bytes is the limit; math.MaxInt64 means none.
	Bytes int64
	// Cgroup is the cgroup's memory limit, 0 when there is none or it was
	// not read.
	Cgroup int64
	Source string
}

// applyMemoryLimit sets the Go memory limit (set is debug.SetMemoryLimit)
// to spec, which parseMemoryLimit made:
//
//   - memoryLimitAuto: memoryRatio of what cgroup (automemlimit's
//     FromCgroup outside tests) reports, none without a limit; a
//     GOMEMLIMIT environment variable (env) wins, as the runtime has
//     applied it already and an operator who set it meant it;
//   - math.MaxInt64 (off): no limit;
//   - else that many bytes, over GOMEMLIMIT too.
//
// automemlimit's Set is not used: it would also obey its own
// AUTOMEMLIMIT variable, and it does not say what the cgroup allowed.
//
// An error means the cgroup could not be read; the limit then stays as
// it was (none), which the caller reports as a warning.
func applyMemoryLimit(spec int64, env string, cgroup memlimit.Provider, set func(int64) int64) (memoryLimit, error) {
	switch {
	case spec == math.MaxInt64:
		set(spec)
		return memoryLimit{Bytes: spec, Source: sourceNone}, nil
	case spec != memoryLimitAuto:
		set(spec)
		return memoryLimit{Bytes: spec, Source: sourceFlag}, nil
	case env != "":
		// -1 reads the limit without changing it.
		return memoryLimit{Bytes: set(-1), Source: sourceGOMEMLIMIT}, nil
	}
	cg, err := cgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit), errors.Is(err, memlimit.ErrNoCgroup),
		errors.Is(err, memlimit.ErrCgroupsNotSupported), err == nil && cg > math.MaxInt64:
		// Not in a container with a memory limit: nothing to work to.
		return memoryLimit{Bytes: set(-1), Source: sourceNone}, nil
	case err != nil:
		return memoryLimit{Bytes: set(-1), Source: sourceNone}, err
	}
	b, err := memlimit.ApplyRatio(memlimit.Limit(cg), memoryRatio)()
	if err != nil { // only for a ratio outside (0, 1]
		return memoryLimit{Bytes: set(-1), Source: sourceNone}, err
	}
	set(int64(b))
	return memoryLimit{Bytes: int64(b), Cgroup: int64(cg), Source: sourceCgroup}, nil
}
