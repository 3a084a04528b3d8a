//! The graph of paths from triggers, as a data-flow fixpoint instead of a path enumeration.
//!
//! Each node collects the set of [`PathState`]s with which some path from a trigger arrives
//! at it: the last gate passed (if any), what the branches since that gate said about its
//! outcome, whether a Remove Duplicates or an approval-holding `prepare` was passed, and
//! whether the path began at a schedule. The state space is small (gates × a few flags), so
//! a 1,000-node workflow with loops settles in milliseconds, and "on some path" questions
//! become "in some state". A disabled node passes items through unchanged, as n8n does.

use std::cell::OnceCell;
use std::collections::{HashSet, VecDeque};

use crate::model::{output_checks, IdemOp, OutputCheck, Role};
use crate::workflow::Workflow;

/// What the claim's outcome is known to be on a path, since its last gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Check {
    Unchecked,
    Acquired,
    Completed,
    NotAcquired,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathState {
    /// The last gate (claim or effect) on the path.
    pub gate: Option<usize>,
    pub check: Check,
    /// A Remove Duplicates node was passed.
    pub dedup_filter: bool,
    /// A `prepare` with `approval_required` was passed after the gate.
    pub approval: bool,
    /// The path began at a schedule trigger.
    pub schedule: bool,
}

/// The workflow with roles, adjacency and the states reaching each node.
pub struct Flow<'a> {
    pub wf: &'a Workflow,
    pub roles: Vec<Role>,
    /// `succ[n]` = (output, target) of every edge leaving `n`.
    pub succ: Vec<Vec<(usize, usize)>>,
    pub pred: Vec<Vec<usize>>,
    pub states: Vec<Vec<PathState>>,
    checks: Vec<Vec<OutputCheck>>,
    /// `downstream(n)`, computed once per node on first use.
    down: Vec<OnceCell<Vec<bool>>>,
    /// The strongly connected component of each node (nodes on one loop share it).
    component: Vec<usize>,
}

impl<'a> Flow<'a> {
    pub fn new(wf: &'a Workflow, extra_effects: &[String]) -> Self {
        let n = wf.nodes.len();
        let roles: Vec<Role> = wf
            .nodes
            .iter()
            .map(|node| crate::model::role(node, extra_effects))
            .collect();
        let mut succ = vec![Vec::new(); n];
        let mut pred = vec![Vec::new(); n];
        for e in &wf.edges {
            succ[e.from].push((e.output, e.to));
            pred[e.to].push(e.from);
        }
        let checks = wf
            .nodes
            .iter()
            .zip(&roles)
            .map(|(node, role)| output_checks(node, role))
            .collect();
        let mut flow = Flow {
            wf,
            roles,
            succ,
            pred,
            states: vec![Vec::new(); n],
            checks,
            down: (0..n).map(|_| OnceCell::new()).collect(),
            component: Vec::new(),
        };
        flow.component = components(&flow.succ, &flow.pred);
        flow.propagate();
        flow
    }

    fn propagate(&mut self) {
        let mut seen: HashSet<(usize, PathState)> = HashSet::new();
        let mut queue: VecDeque<(usize, PathState)> = VecDeque::new();
        for (i, role) in self.roles.iter().enumerate() {
            if let Role::Trigger { schedule } = role {
                let s = PathState {
                    gate: None,
                    check: Check::Unchecked,
                    dedup_filter: false,
                    approval: false,
                    schedule: *schedule,
                };
                if seen.insert((i, s)) {
                    queue.push_back((i, s));
                }
            }
        }
        while let Some((node, s)) = queue.pop_front() {
            self.states[node].push(s);
            let leaving = self.leave(node, s);
            for &(output, to) in &self.succ[node] {
                let mut next = leaving;
                match self.checks[node]
                    .get(output)
                    .copied()
                    .unwrap_or(OutputCheck::Unchanged)
                {
                    OutputCheck::Acquired => next.check = Check::Acquired,
                    OutputCheck::Completed => next.check = Check::Completed,
                    OutputCheck::NotAcquired => next.check = Check::NotAcquired,
                    OutputCheck::Unchanged => {}
                }
                if seen.insert((to, next)) {
                    queue.push_back((to, next));
                }
            }
        }
    }

    /// The state after passing through `node` (before its output's check applies).
    fn leave(&self, node: usize, mut s: PathState) -> PathState {
        match &self.roles[node] {
            Role::Idem(c) if c.is_gate() => {
                s.gate = Some(node);
                s.check = Check::Unchecked;
                s.approval = false;
            }
            Role::Idem(c) if c.op == IdemOp::Prepare && c.approval_required => s.approval = true,
            Role::RemoveDuplicates => s.dedup_filter = true,
            _ => {}
        }
        s
    }

    /// Whether some trigger reaches the node.
    pub fn reached(&self, node: usize) -> bool {
        !self.states[node].is_empty()
    }

    /// Side effects reachable from a trigger, in node order.
    pub fn effects(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.roles.len())
            .filter(|&i| matches!(self.roles[i], Role::Effect(_)) && self.reached(i))
    }

    /// Gates (claim or effect calls), reached or not.
    pub fn gates(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.roles.len()).filter(|&i| matches!(&self.roles[i], Role::Idem(c) if c.is_gate()))
    }

    /// Nodes reachable from `start` by at least one edge (through every output; `start`
    /// itself only when it lies on a cycle).
    pub fn downstream(&self, start: usize) -> &[bool] {
        self.down[start].get_or_init(|| {
            self.downstream_of(&self.succ[start].iter().map(|&(_, t)| t).collect::<Vec<_>>())
        })
    }

    /// The nodes on a loop through `node` (empty when it is on none).
    pub fn loop_through(&self, node: usize) -> Vec<usize> {
        let c = self.component[node];
        let members: Vec<usize> = (0..self.component.len())
            .filter(|&m| self.component[m] == c)
            .collect();
        let self_loop = self.succ[node].iter().any(|&(_, t)| t == node);
        if members.len() > 1 || self_loop {
            members
        } else {
            Vec::new()
        }
    }

    /// Nodes reachable from the targets of one output of `node` (those targets included).
    pub fn downstream_output(&self, node: usize, output: usize) -> Vec<bool> {
        let starts: Vec<usize> = self.succ[node]
            .iter()
            .filter(|(o, _)| *o == output)
            .map(|&(_, t)| t)
            .collect();
        self.downstream_of(&starts)
    }

    /// Nodes reachable from `start` by at least one edge along a path that passes through no
    /// node for which `stop` holds (such a node is marked reached but not gone through).
    pub fn downstream_until(&self, start: usize, stop: impl Fn(usize) -> bool) -> Vec<bool> {
        let starts: Vec<usize> = self.succ[start].iter().map(|&(_, t)| t).collect();
        self.reach(&starts, stop)
    }

    fn downstream_of(&self, starts: &[usize]) -> Vec<bool> {
        self.reach(starts, |_| false)
    }

    /// Nodes reachable from `starts` (included), not going on past a node where `stop` holds.
    fn reach(&self, starts: &[usize], stop: impl Fn(usize) -> bool) -> Vec<bool> {
        let mut seen = vec![false; self.roles.len()];
        let mut stack: Vec<usize> = starts.to_vec();
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n], true) || stop(n) {
                continue;
            }
            stack.extend(self.succ[n].iter().map(|&(_, t)| t));
        }
        seen
    }

    /// The node's outputs and what each says about the outcome.
    pub fn output_checks(&self, node: usize) -> &[OutputCheck] {
        &self.checks[node]
    }

    pub fn name(&self, node: usize) -> &str {
        &self.wf.nodes[node].name
    }
}

/// Strongly connected components (Kosaraju, iterative): component index per node.
fn components(succ: &[Vec<(usize, usize)>], pred: &[Vec<usize>]) -> Vec<usize> {
    let n = succ.len();
    let mut order = Vec::with_capacity(n);
    let mut visited = vec![false; n];
    for root in 0..n {
        if visited[root] {
            continue;
        }
        visited[root] = true;
        let mut stack = vec![(root, 0usize)];
        while let Some((v, i)) = stack.pop() {
            if let Some(&(_, w)) = succ[v].get(i) {
                stack.push((v, i + 1));
                if !visited[w] {
                    visited[w] = true;
                    stack.push((w, 0));
                }
            } else {
                order.push(v);
            }
        }
    }
    let mut comp = vec![usize::MAX; n];
    let mut next = 0;
    for &root in order.iter().rev() {
        if comp[root] != usize::MAX {
            continue;
        }
        comp[root] = next;
        let mut stack = vec![root];
        while let Some(v) = stack.pop() {
            for &u in &pred[v] {
                if comp[u] == usize::MAX {
                    comp[u] = next;
                    stack.push(u);
                }
            }
        }
        next += 1;
    }
    comp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::parse_workflow;
    use serde_json::json;

    #[test]
    fn states_track_the_last_gate_and_its_check() {
        let wf = parse_workflow(
            &json!({"name": "w", "nodes": [
                {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2},
                {"name": "Claim", "type": "n8n-nodes-idem.idempotencyGate", "typeVersion": 1,
                 "parameters": {"operation": "claim", "key": "={{ $json.body.id }}"}},
                {"name": "Mail", "type": "n8n-nodes-base.gmail", "typeVersion": 2.1},
                {"name": "Loose", "type": "n8n-nodes-base.slack", "typeVersion": 2.3}
            ], "connections": {
                "Hook": {"main": [[{"node": "Claim", "type": "main", "index": 0}, {"node": "Loose", "type": "main", "index": 0}]]},
                "Claim": {"main": [[{"node": "Mail", "type": "main", "index": 0}]]},
                "Mail": {"main": [[{"node": "Hook", "type": "main", "index": 0}]]}
            }}),
            "",
        )
        .unwrap();
        let f = Flow::new(&wf, &[]);
        assert_eq!(f.states[2].len(), 1);
        assert_eq!(f.states[2][0].gate, Some(1));
        assert_eq!(f.states[2][0].check, Check::Acquired);
        assert_eq!(f.states[3][0].gate, None);
        assert_eq!(f.effects().collect::<Vec<_>>(), [2, 3]);
        // Mail loops back to the trigger: it is downstream of itself, on a loop with it.
        assert!(f.downstream(2)[2]);
        assert_eq!(f.loop_through(2), [0, 1, 2]);
        assert!(f.loop_through(3).is_empty());
    }
}
