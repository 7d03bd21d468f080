package gateway

import (
	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
)

// Who may do what is the policy's (data.sandgate.authz.decision): every
// route asks it one question, may this principal do this action on this
// object? The routes that act on a run or a session ask it through the
// gate, which knows the object (its team, who made it); the rest ask it
// here, before their handler, with an object of its kind.

// keyAuthz is where authorize leaves the decision for the handler.
const keyAuthz = "sandgate.authz"

// authorize lets the request through when the policy lets its principal
// do action on an object of kind: an object of no team (the policy, the
// trail, the node's sandboxes), or, for a list of a team's objects
// (ownTeam), the principal's own team's, the decision's AllTeams then
// saying whether the list shows every team's. A denial names its rule.
func (s edge) authorize(action sandgate.Action, kind string, ownTeam bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := principal(c)
			obj := sandgate.AuthzObject{Kind: kind}
			if ownTeam {
				obj.Team = p.Team
			}
			d := s.d.Authorizer.Authorize(c.Request().Context(), sandgate.AuthzRequest{Principal: p, SignIn: signIn(c), Action: action, Object: obj})
			if !d.Allow {
				return s.deny(c, p, "forbidden", d.Rule+": "+d.Message, d.Err(action))
			}
			c.Set(keyAuthz, d)
			return next(c)
		}
	}
}

// readsAllTeams reports whether the policy lets the request's principal
// do action on every team's objects of kind.
func (s *web) readsAllTeams(c echo.Context, action sandgate.Action, kind string) bool {
	p := principal(c)
	d := s.d.Authorizer.Authorize(c.Request().Context(), sandgate.AuthzRequest{Principal: p, SignIn: signIn(c), Action: action,
		Object: sandgate.AuthzObject{Kind: kind, Team: p.Team}})
	return d.Allow && d.AllTeams
}

// allTeams reports whether the request's authorization covers every
// team's objects (an auditor's list of runs), not only its own team's.
func allTeams(c echo.Context) bool {
	d, _ := c.Get(keyAuthz).(sandgate.AuthzDecision)
	return d.AllTeams
}
