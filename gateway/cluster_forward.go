package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// Headers of a request one node forwards to another. The request keeps
// its Authorization: the owner authenticates the caller itself (every
// node reads the same tokens file); the signature proves the hop came
// from a node of the cluster, and a forwarded request is never forwarded
// again.
const (
	headerForwardNode = "X-Sandgate-Forwarded-By"
	headerForwardTime = "X-Sandgate-Forwarded-At"
	headerForwardSig  = "X-Sandgate-Forward-Signature"
	keyForwarded      = "sandgate.forwarded"
)

// acceptForwarded marks a request another node forwarded, when its
// signature holds for this very request (forwardClaim): to this node,
// within the skew, with its caller's credentials and its body, its nonce
// not seen before. A request that claims to be forwarded and is not so
// signed is UNAUTHENTICATED.
func (s edge) acceptForwarded(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		h := req.Header
		from := h.Get(headerForwardNode)
		if from == "" {
			return next(c)
		}
		claim := forwardClaim{
			From: from, To: s.cfg.Node, At: h.Get(headerForwardTime), Nonce: h.Get(headerForwardNonce),
			Method: req.Method, URI: req.URL.RequestURI(), Caller: callerDigest(h.Get("Authorization")),
			ContentType: h.Get("Content-Type"), Body: h.Get(headerForwardBody),
		}
		refuse := func(err error) error {
			s.logger(c).Warn("a forwarded request refused", "from", from, "error", err)
			return sandgate.Errorf(sandgate.CodeUnauthenticated, "the forwarded request's node signature is not valid: %v", err)
		}
		now := s.d.Clock()
		if err := claim.check(s.cfg.ClusterSecret, h.Get(headerForwardSig), now); err != nil {
			return refuse(err)
		}
		if err := checkBody(req, claim.Body, s.cfg.BodyLimit); err != nil {
			return refuse(err)
		}
		if s.node.cluster == nil {
			return refuse(errors.New("this node is in no cluster"))
		}
		if err := s.node.cluster.nonces.use(claim.Nonce, now); errors.Is(err, errForwardReplayed) {
			return refuse(err)
		} else if err != nil {
			return sandgate.Errorf(sandgate.CodeUnavailable, "forwarded request refused: %v; retry later", err)
		}
		c.Set(keyForwarded, from)
		return next(c)
	}
}

func forwarded(c echo.Context) bool {
	v, _ := c.Get(keyForwarded).(string)
	return v != ""
}

// ownerOf finds the node a request's run or session executes on, when
// the caller may reach it: the gate resolves it, and another team's
// object is not forwarded (it is answered here, exactly as one that does
// not exist).
type ownerOf func(ctx context.Context, s *web, p sandgate.Principal, id string) (node string, active bool)

func runOwner(ctx context.Context, s *web, p sandgate.Principal, id string) (string, bool) {
	node, active := s.gate.RunOwner(ctx, p, id)
	if node == s.cfg.Node && s.node.fenced() != nil {
		// A fenced node's live runs were taken over: the store says whose.
		if r, err := s.d.Runs.GetRun(ctx, id); err == nil && r != nil {
			return r.Node, r.State != sandgate.StateFinished
		}
	}
	return node, active
}

func sessionOwner(ctx context.Context, s *web, p sandgate.Principal, id string) (string, bool) {
	node, active := s.gate.SessionOwner(ctx, p, id)
	if node == s.cfg.Node && s.node.fenced() != nil && s.d.Sessions != nil {
		if ss, err := s.d.Sessions.GetSession(ctx, id); err == nil && ss != nil {
			return ss.Node, ss.State == sandgate.SessionOpen
		}
	}
	return node, active
}

// toOwner forwards a request for a run or session that executes on
// another node of the cluster to that node, over the address it
// advertises; the owner answers it as if it had been asked (cancel,
// live logs, session commands and files). Anything else (a finished run,
// an owner that is not alive, no cluster) is answered here.
func (s edge) toOwner(owner ownerOf) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			cl := s.node.cluster
			if cl == nil || forwarded(c) || len(s.cfg.ClusterSecret) == 0 {
				return next(c)
			}
			ctx := c.Request().Context()
			node, active := owner(ctx, s.web, principal(c), c.Param("id"))
			if !active || node == "" || node == s.cfg.Node {
				return next(c)
			}
			n, ok := cl.node(ctx, node)
			if !ok || n.State != sandgate.NodeAlive || n.AdvertiseURL == "" {
				return next(c)
			}
			return s.forwardTo(c, n)
		}
	}
}

// toCapacity sends a new run to another node when this one holds as many
// runs as it has container slots, or its Docker daemon did not answer
// its last heartbeat's ping, and another alive node with a healthy daemon
// has a free slot; when none has, the run is answered here (it waits for
// a slot, or fails DOCKER-UNAVAILABLE).
func (s edge) toCapacity(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		cl := s.node.cluster
		if cl == nil || forwarded(c) || len(s.cfg.ClusterSecret) == 0 || s.cfg.Capacity <= 0 {
			return next(c)
		}
		ctx := c.Request().Context()
		load, err := cl.store.NodeSlots(ctx)
		if err != nil {
			return next(c)
		}
		self, known := cl.node(ctx, s.cfg.Node)
		// A fenced node starts no run: it sends each on, or refuses it.
		healthy := (!known || self.DockerHealthy) && s.node.fenced() == nil
		if healthy && load[s.cfg.Node] < s.cfg.Capacity {
			return next(c)
		}
		nodes, err := cl.all(ctx)
		if err != nil {
			return next(c)
		}
		best, free := sandgate.Node{}, 0
		for _, n := range nodes {
			if n.Name == s.cfg.Node || n.State != sandgate.NodeAlive || n.AdvertiseURL == "" || !n.DockerHealthy {
				continue
			}
			if f := n.Capacity - load[n.Name]; f > free {
				best, free = n, f
			}
		}
		if free == 0 {
			return next(c)
		}
		s.logger(c).Info("this node is at capacity or its daemon is away; the run goes to another", "to", best.Name, "free", free, "docker_healthy", healthy)
		return s.forwardTo(c, best)
	}
}

// forwardTo proxies the request to node n, streaming its answer (SSE
// events are flushed as they come).
func (s edge) forwardTo(c echo.Context, n sandgate.Node) error {
	target, err := url.Parse(n.AdvertiseURL)
	if err != nil {
		return sandgate.Errorf(sandgate.CodeUnavailable, "node %s advertises an address that is no URL", n.Name)
	}
	req := c.Request()
	body, err := bodyClaim(req, s.cfg.BodyLimit)
	if err != nil {
		return sandgate.Errorf(sandgate.CodeInvalidRequest, "the request's body could not be read: %v", err)
	}
	claim := forwardClaim{
		From: s.cfg.Node, To: n.Name, At: strconv.FormatInt(s.d.Clock().Unix(), 10), Nonce: newForwardNonce(),
		Method: req.Method, URI: req.URL.RequestURI(), Caller: callerDigest(req.Header.Get("Authorization")),
		ContentType: req.Header.Get("Content-Type"), Body: body,
	}
	sig := claim.mac(s.cfg.ClusterSecret)
	failed := false
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = req.URL.Path, req.URL.RawPath
			pr.Out.URL.RawQuery = req.URL.RawQuery
			pr.Out.Host = target.Host
			pr.Out.Header.Set(headerForwardNode, s.cfg.Node)
			pr.Out.Header.Set(headerForwardTime, claim.At)
			pr.Out.Header.Set(headerForwardNonce, claim.Nonce)
			pr.Out.Header.Set(headerForwardBody, claim.Body)
			pr.Out.Header.Set(headerForwardSig, sig)
			pr.Out.Header.Set("X-Correlation-ID", correlationID(c))
		},
		FlushInterval: -1,
		ModifyResponse: func(r *http.Response) error {
			r.Header.Del("X-Correlation-ID") // set here already
			return nil
		},
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { failed = true },
	}
	s.logger(c).Info("forwarding to the owning node", "to", n.Name, "method", req.Method, "path", req.URL.Path)
	p.ServeHTTP(c.Response(), req)
	if failed && !c.Response().Committed {
		return sandgate.Errorf(sandgate.CodeUnavailable, "node %s, which holds this, does not answer; retry later", n.Name)
	}
	return nil
}

// listNodes is GET /v1/nodes: the cluster's nodes, their state, load and
// Docker daemon's health.
func (s adminRoutes) listNodes(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	out := api.NodeList{Nodes: []api.NodeView{}}
	if s.node.cluster == nil {
		return c.JSON(http.StatusOK, out)
	}
	nodes, err := s.node.cluster.all(c.Request().Context())
	if err != nil {
		return unavailable(err, "the node registry")
	}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, api.NodeView{
			Name: n.Name, State: string(n.State), AdvertiseURL: n.AdvertiseURL, DockerHost: n.DockerHost,
			DockerHealthy: n.DockerHealthy, DockerError: n.DockerError, Running: n.Running, Capacity: n.Capacity,
			KeyID: n.KeyID, PublicKey: n.PublicKey, KeyRegistered: n.KeyRegistered, Version: n.Version, StartedAt: n.StartedAt, HeartbeatAt: n.HeartbeatAt,
			HeartbeatAgeMS: n.HeartbeatAge.Milliseconds(), TakenOverBy: n.TakenOverBy, TakenOverAt: n.TakenOverAt,
			HeldEvents: n.HeldEvents, Self: n.Name == s.cfg.Node,
		})
		if n.Name == s.cfg.Node {
			if err := s.node.fenced(); err != nil {
				out.Nodes[len(out.Nodes)-1].Fenced = sandgate.ErrorMessageOf(err)
			}
		}
	}
	return c.JSON(http.StatusOK, out)
}
