package runtimetune

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestParseSizeMatchesParseQuantity parses the forms operators write for
// memory, and random ones of the same shape, with parseSize and with
// apimachinery's resource.ParseQuantity: where both accept, the bytes
// must be equal, and parseSize must accept every one of these forms that
// ParseQuantity accepts, up to 8 EiB.
func TestParseSizeMatchesParseQuantity(t *testing.T) {
	inputs := []string{
		"96Mi", "100M", "1.5Gi", "100000000", "1", "0.5", "1.0000001Ki", "+64Mi", "0",
		"1k", "1Ki", "2G", "3Ti", "4T", "1Pi", "1P", "7Ei", "8E", ".5Gi", "5.", "007Mi",
		"123456789012", "0.000001Ki", "9223372036854775807", "1.9999999999999999999999Mi",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	suffixes := []string{"", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"}
	for range 2000 {
		n := fmt.Sprint(rng.IntN(100000))
		if rng.IntN(2) == 0 {
			n += "." + fmt.Sprint(rng.IntN(1000))
		}
		inputs = append(inputs, n+suffixes[rng.IntN(len(suffixes))])
	}
	for _, s := range inputs {
		q, qerr := resource.ParseQuantity(s)
		got, err := parseSize(s)
		switch {
		case errors.Is(err, errTooLarge):
			// Above 8 EiB ParseQuantity's Value wraps or saturates
			// (e.g. 0 for 15879P); refusing is the better answer.
		case qerr != nil && err != nil:
		case qerr != nil:
			t.Errorf("parseSize(%q) = %d, but ParseQuantity refuses it: %v", s, got, qerr)
		case err != nil:
			t.Errorf("parseSize(%q): %v, but ParseQuantity gives %d", s, err, q.Value())
		case got != q.Value():
			t.Errorf("parseSize(%q) = %d, ParseQuantity gives %d", s, got, q.Value())
		}
	}
}

// TestParseSizeErrors checks what parseSize refuses, and that each error
// says what a size looks like.
func TestParseSizeErrors(t *testing.T) {
	for _, s := range []string{"", "lots", "-1Mi", "1.2.3", "Mi", "+", ".", "1MB", "1mi", "1K", "100m", "1e9", "1Yi", "10Ei", "99999999999999999999"} {
		got, err := parseSize(s)
		if err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, got)
			continue
		}
		if !strings.Contains(err.Error(), "want a size such as 96Mi") {
			t.Errorf("parseSize(%q) error %q does not say what a size looks like", s, err)
		}
	}
}
