package harness

// Teardown runs every teardown still pending: for programs that use the
// harness outside `go test` (the demo), where Main is not available. Start
// and StartFanout with a nil testing.TB register their teardowns for it.
func Teardown() { runRegistered() }
