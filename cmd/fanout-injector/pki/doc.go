// Package pki is fanout-injector's one job under --pki=self: keep a CA and
// a serving certificate for the webhook in one Secret that every replica
// shares, rotate both before they expire, serve the current certificate,
// and keep the caBundle of the injector's MutatingWebhookConfiguration
// equal to the CAs that Secret trusts. See docs/injector.md, Install.
package pki
