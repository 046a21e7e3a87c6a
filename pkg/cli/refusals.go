package cli

import (
	"errors"
	"net"
)

// A cliReason is a failure of nodus' own, one the server did not answer
// with a Status: it refused the server's answer, did not reach the server
// or does not trust it, or waited in vain. Like the server's reasons, each
// has a page (docs/cli/{Name}.md, printed by `nodus errors NAME` without
// asking any server: the one failing may be the one that would serve it)
// and a fix.
type cliReason struct {
	Name    string
	Exit    int
	Summary string
	Fix     string
	// Transient: the same request, sent again, may succeed.
	Transient bool
}

var (
	reasonServerUnreachable = &cliReason{Name: "ServerUnreachable", Exit: ExitServer, Transient: true,
		Summary: "The server did not answer.",
		Fix:     "Check that nodus-server runs and that this configuration points at it (`nodus config get-contexts` shows where)."}
	reasonServerNotTrusted = &cliReason{Name: "ServerNotTrusted", Exit: ExitServer,
		Summary: "The server's certificate is not one this configuration trusts.",
		Fix:     "Log in again with the server's CA, `nodus login --server URL --ca-file ca.crt` (the server serves it at /ca.crt; compare its fingerprint with your operator's)."}
	reasonRedirectRefused = &cliReason{Name: "RedirectRefused", Exit: ExitServer,
		Summary: "The server answered with a redirect, which nodus does not follow.",
		Fix:     "Log in with the server's own address, not one that redirects (`nodus config get-contexts` shows the one in use); a nodus-server never redirects an API request."}
	reasonAnswerTooLarge = &cliReason{Name: "AnswerTooLarge", Exit: ExitServer,
		Summary: "The server's answer is larger than nodus reads.",
		Fix:     "Ask for less (one project with -n, one object by name), or ask your operator why the server sends answers this large."}
	reasonAnswerRefused = &cliReason{Name: "AnswerRefused", Exit: ExitServer,
		Summary: "The server's answer is not what nodus asked for, or not of the form a nodus-server gives.",
		Fix:     "Nothing of the answer was used or written. Tell your operator, with the message: a nodus-server does not send this, so the server, or something between it and you, is at fault."}
	reasonNotDrained = &cliReason{Name: "NotDrained", Exit: ExitServer, Transient: true,
		Summary: "The host's agent has not confirmed within --timeout that nothing runs on the host any more.",
		Fix:     "The release is recorded and stays. Wait longer (`nodus release PROJECT/NAME --wait --timeout 30m` waits again and releases nothing twice), and ask your operator whether the host's agent is connected."}
	reasonHostNotConnectable = &cliReason{Name: "HostNotConnectable", Exit: ExitConflict,
		Summary: "The host gives no access now, or shows no way to connect to it.",
		Fix:     "`nodus hosts get PROJECT/NAME` shows the host's state and its Connected condition, which says why. A pending host is connectable from its start; one released or past its term is not any more; for a host that is active but not connected, ask your operator."}
	reasonSSHClientMissing = &cliReason{Name: "SSHClientMissing", Exit: ExitOther,
		Summary: "The system's ssh client is not installed.",
		Fix:     "Install OpenSSH's client (`apt install openssh-client`, `dnf install openssh-clients`; macOS has it) and run nodus ssh again: the host's entry is installed already."}
)

// cliReasons lists every reason of nodus' own, in the order `nodus errors`
// shows them.
var cliReasons = []*cliReason{reasonServerUnreachable, reasonServerNotTrusted, reasonRedirectRefused,
	reasonAnswerTooLarge, reasonAnswerRefused, reasonNotDrained, reasonHostNotConnectable, reasonSSHClientMissing}

// A refusal is an error of a cliReason.
type refusal struct {
	reason *cliReason
	err    error
	// fix is this failure's own next step, when it knows a better one
	// than its reason's.
	fix string
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// Fix is the next step for this failure.
func (r *refusal) Fix() string {
	if r.fix != "" {
		return r.fix
	}
	return r.reason.Fix
}

// refuse is err as a failure of reason.
func refuse(reason *cliReason, err error) error { return &refusal{reason: reason, err: err} }

// refuseWithFix is err as a failure of reason, with a next step of its own.
func refuseWithFix(reason *cliReason, err error, fix string) error {
	return &refusal{reason: reason, err: err, fix: fix}
}

// refusalOf is the failure of nodus' own that err is, if it is one:
// refused by nodus itself, or the server not reached or not trusted.
func refusalOf(err error) (*refusal, bool) {
	var r *refusal
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &r):
		return r, true
	case untrusted(err):
		return &refusal{reason: reasonServerNotTrusted, err: err}, true
	case errors.As(err, &dns) || errors.As(err, &op):
		return &refusal{reason: reasonServerUnreachable, err: err}, true
	}
	return nil, false
}
