package embeddedetcd

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
)

// InProcessClient is a client of the member that calls its services
// directly in this process (etcd's v3client), the way etcd's own lock and
// election services reach it. The server on embedded etcd keeps its objects
// through such clients: its ClientURL costs every call TLS, HTTP/2 framing
// and protobuf both ways on both ends, which was a quarter of the server's
// CPU serving GETs (docs/performance.md, "The store called in process").
// Close it when done; it fails its calls once the member stops.
func (s *Server) InProcessClient() *clientv3.Client { return v3client.New(s.etcd.Server) }

// InProcessLeaseClient is the member's lease service called in this
// process, for callers that keep LeaseKeepAlive streams of their own (an
// InProcessClient has no gRPC connection to open them on).
func (s *Server) InProcessLeaseClient() pb.LeaseClient {
	return adapter.LeaseServerToLeaseClient(v3rpc.NewQuotaLeaseServer(s.etcd.Server))
}
