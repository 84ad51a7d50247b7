package resolver

import (
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNamesMatchValidation checks the name rules against apimachinery's
// validation, which the resolver used before: for hand-picked and random
// names, each check accepts exactly what validation accepts.
func TestNamesMatchValidation(t *testing.T) {
	names := []string{
		"", "a", "A", "0", "-", "a-", "-a", "a-b", "a--b", "0a", "a0", "default", "kube-system", "kubernetes", "https",
		"my-port", "http-2", "123", "1-2", "x.y", "a_b", "é", "abcdefghijklmno", "abcdefghijklmnop",
		"a123456789012345678901234567890123456789012345678901234567890bc",
		"a1234567890123456789012345678901234567890123456789012345678901bc",
	}
	const alphabet = "ab09-.A_"
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := make([]byte, rng.IntN(18))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		for _, c := range []struct {
			what string
			own  func(string) error
			ref  func(string) []string
		}{
			{"namespace", checkNamespace, validation.IsDNS1123Label},
			{"service", checkService, validation.IsDNS1035Label},
			{"port name", checkPortName, validation.IsValidPortName},
		} {
			own, ref := c.own(n) == nil, len(c.ref(n)) == 0
			if own != ref {
				t.Errorf("%s %q: ours accepts %v, apimachinery accepts %v (%v)", c.what, n, own, ref, c.ref(n))
			}
		}
	}
}
