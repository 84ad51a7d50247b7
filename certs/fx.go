package certs

import "go.uber.org/fx"

// Module provides *Credentials from the *Upstream the app supplies (the
// app loads the kubeconfig itself, before fx starts, because flags and
// endpoint defaults depend on it).
var Module = fx.Module("certs",
	fx.Provide(NewCredentials),
)
