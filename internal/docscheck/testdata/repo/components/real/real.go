// Package real is named in docs/guide.md (Flags) and in
// docs/guide.md, Missing
// section), and in docs/nothing.md#flags and components/real/gone.go.
package real
