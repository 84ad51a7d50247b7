package resolver

import (
	"errors"
	"strings"
)

// The checks below are Kubernetes' own rules for the names in an
// endpointslice:/// spec (apimachinery's validation.IsDNS1123Label,
// IsDNS1035Label and IsValidPortName; a test compares them), so that a
// name the API would refuse fails at start rather than as an empty list.

// checkNamespace checks a namespace name: an RFC 1123 label.
func checkNamespace(s string) error {
	return checkLabel(s, "a namespace is a lowercase RFC 1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit", false)
}

// checkService checks a Service name: an RFC 1035 label.
func checkService(s string) error {
	return checkLabel(s, "a Service name is a lowercase RFC 1035 label: at most 63 characters, lowercase letters, digits and '-', starting with a letter and ending with a letter or digit", true)
}

func checkLabel(s, rule string, letterFirst bool) error {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' || letterFirst && !isLower(s[0]) {
		return errors.New(rule)
	}
	for i := range len(s) {
		if c := s[i]; !isLower(c) && !isDigit(c) && c != '-' {
			return errors.New(rule)
		}
	}
	return nil
}

// checkPortName checks a Service port name (an IANA service name).
func checkPortName(s string) error {
	const rule = "a port name has 1 to 15 characters, lowercase letters, digits and '-', at least one letter, no '-' at either end and no '--'"
	if s == "" || len(s) > 15 || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return errors.New(rule)
	}
	letter := false
	for i := range len(s) {
		c := s[i]
		switch {
		case isLower(c):
			letter = true
		case isDigit(c) || c == '-':
		default:
			return errors.New(rule)
		}
	}
	if !letter {
		return errors.New(rule)
	}
	return nil
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
