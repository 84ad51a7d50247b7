package runtimetune

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// errTooLarge is parseSize's error for a size above math.MaxInt64 bytes,
// which resource.Quantity.Value does not report (it wraps or saturates).
var errTooLarge = errors.New("more bytes than fit in 63 bits")

// sizeSuffixes are the Kubernetes quantity suffixes that make sense for
// bytes, with their multipliers: binary (Ki..Ei) and decimal (k..E).
// "m" (milli) and the exponent form (1e9) are quantities too but nobody
// writes a memory limit that way; they are refused with a hint.
var sizeSuffixes = map[string]int64{
	"":   1,
	"k":  1e3,
	"M":  1e6,
	"G":  1e9,
	"T":  1e12,
	"P":  1e15,
	"E":  1e18,
	"Ki": 1 << 10,
	"Mi": 1 << 20,
	"Gi": 1 << 30,
	"Ti": 1 << 40,
	"Pi": 1 << 50,
	"Ei": 1 << 60,
}

// parseSize parses a size as a Kubernetes resource quantity is written
// for memory: a decimal number, optionally with a fraction, and one of the
// suffixes Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or k, M, G, T, P, E
// (powers of 1000), e.g. 96Mi, 100M, 1.5Gi or 100000000. A fraction of a
// byte rounds up, as resource.Quantity.Value does. It accepts what
// resource.ParseQuantity accepts in these forms and gives the same number
// of bytes (see the differential test), without linking apimachinery.
func parseSize(s string) (int64, error) {
	const want = "want a size such as 96Mi, 100M, 1.5Gi or 100000000 (suffixes Ki Mi Gi Ti Pi Ei, k M G T P E)"
	num := strings.TrimLeft(s, "+0123456789.")
	num, suffix := s[:len(s)-len(num)], num
	mult, ok := sizeSuffixes[suffix]
	switch {
	case s == "":
		return 0, errors.New("empty size; " + want)
	case strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("%q is negative; %s", s, want)
	case !ok:
		return 0, fmt.Errorf("%q: unknown suffix %q; %s", s, suffix, want)
	}
	num = strings.TrimPrefix(num, "+")
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" && frac == "" || strings.ContainsAny(whole+frac, "+.") {
		return 0, fmt.Errorf("%q is not a number; %s", s, want)
	}
	// Exact: whole.frac × mult, rounded up to a whole byte.
	n, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return 0, fmt.Errorf("%q is not a number; %s", s, want)
	}
	v := new(big.Rat).SetFrac(n.Mul(n, big.NewInt(mult)), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
	bytes := new(big.Int).Quo(v.Num(), v.Denom())
	if new(big.Rat).SetInt(bytes).Cmp(v) < 0 {
		bytes.Add(bytes, big.NewInt(1))
	}
	if !bytes.IsInt64() {
		return 0, fmt.Errorf("%q: %w; %s", s, errTooLarge, want)
	}
	return bytes.Int64(), nil
}

// ParseSize parses a size written as a Kubernetes memory quantity (96Mi,
// 100M, 1.5Gi, 100000000), for other flags that take sizes.
func ParseSize(s string) (int64, error) { return parseSize(s) }
