package agent

import (
	"net/http"

	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/answerbound"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// maxAnswerBytes bounds an answer of the server's nodusd reads whole (a
// list of its host's executions is the largest it asks for), error answers
// included: a server that sends more, hostile or at fault, gets an error,
// not the host's memory.
var maxAnswerBytes int64 = 256 << 20

// maxWatchEventBytes bounds one event of a watch, which nodusd reads for as
// long as the server keeps it open: a nodus-server stores no object over
// etcd's request bound (1.5 MiB).
var maxWatchEventBytes int64 = 16 << 20

// newClient is nodusd's client of the server of cfg, which reads no answer
// past its bounds. The heartbeat stream bounds its own lines.
func newClient(cfg *rest.Config) (versioned.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return answerbound.Transport{Next: rt, Answer: maxAnswerBytes, WatchEvent: maxWatchEventBytes}
	})
	return versioned.NewForConfig(cfg)
}
