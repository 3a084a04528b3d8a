//! Reading n8n's workflow export (the JSON of *Download* or `n8n export:workflow`) into a
//! [`Workflow`]: nodes with their type, typeVersion, parameters and settings, the `main`
//! connections as edges, and the workflow settings that matter here.
//!
//! Invariant: anything a user sent is checked before it is used; a document that is not an n8n
//! workflow is a [`ParseError`] naming where it stopped making sense, never a panic. Unknown
//! members are ignored (exports carry `pinData`, `meta`, `tags`, positions…).

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Why a document could not be read as an n8n workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Where in the document (`nodes[3].type`, `[1].connections`), empty for the whole.
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

fn err(path: impl Into<String>, message: impl Into<String>) -> ParseError {
    ParseError {
        path: path.into(),
        message: message.into(),
    }
}

/// What a node does when it fails (the node setting *On Error*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Stop the workflow (the default).
    Stop,
    /// Pass the error item on through the normal output.
    ContinueRegular,
    /// Send the error item to an extra *error* output after the normal ones.
    ErrorOutput,
}

/// One node of the canvas.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    /// `n8n-nodes-base.httpRequest`, `n8n-nodes-idem.idempotencyGate`, …
    pub node_type: String,
    pub version: f64,
    /// `parameters` as exported (an object; parameters left at their default are absent).
    pub params: Value,
    pub disabled: bool,
    /// The node setting *Retry On Fail*.
    pub retry_on_fail: bool,
    /// *Max. Tries* (n8n's default is 3 when Retry On Fail is on and the field is absent).
    pub max_tries: u32,
    pub on_error: OnError,
}

impl Node {
    /// A parameter by a path of object members (`["options", "response", "response"]`).
    pub fn param(&self, path: &[&str]) -> Option<&Value> {
        let mut v = &self.params;
        for p in path {
            v = v.get(p)?;
        }
        Some(v)
    }

    /// A string parameter (absent or not a string: `None`).
    pub fn str_param(&self, path: &[&str]) -> Option<&str> {
        self.param(path).and_then(Value::as_str)
    }

    /// Every string inside the parameters, depth first (expressions, code, URLs).
    pub fn strings(&self) -> Vec<&str> {
        let mut out = Vec::new();
        collect_strings(&self.params, &mut out);
        out
    }
}

fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

/// `v` with every object's members sorted by name. JSON objects keep the order they were
/// written in; an audit must not depend on it (the same workflow exported by another tool,
/// or re-serialized, gets the same findings and the same parse error), so the document is
/// read in one order whatever its spelling.
fn in_name_order(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut members: Vec<(&String, &Value)> = o.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                members
                    .into_iter()
                    .map(|(k, x)| (k.clone(), in_name_order(x)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(in_name_order).collect()),
        other => other.clone(),
    }
}

/// A `main` connection: output `output` of node `from` feeds node `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub output: usize,
    pub to: usize,
}

/// One exported workflow.
#[derive(Debug, Clone)]
pub struct Workflow {
    pub name: String,
    pub id: Option<String>,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// `(tool, agent)` of each `ai_tool` connection: the tool node attached to an agent (no
    /// items flow through it; the agent's model decides when to call it).
    pub tools: Vec<(usize, usize)>,
    /// `settings.errorWorkflow` (the id of the workflow that runs when this one fails).
    pub error_workflow: Option<String>,
}

impl Workflow {
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }
}

/// Reads a document holding one workflow or an array of them (`n8n export:workflow --all`).
pub fn parse_document(doc: &Value) -> Result<Vec<Workflow>, ParseError> {
    let doc = &in_name_order(doc);
    match doc {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, w)| parse_workflow(w, &format!("[{i}]")))
            .collect(),
        Value::Object(_) => Ok(vec![parse_workflow(doc, "")?]),
        _ => Err(err(
            "",
            "expected an n8n workflow (an object with `nodes` and `connections`) or an array of them",
        )),
    }
}

fn join(prefix: &str, member: &str) -> String {
    if prefix.is_empty() {
        member.to_owned()
    } else {
        format!("{prefix}.{member}")
    }
}

/// Reads one workflow object; `at` prefixes the paths of errors.
pub fn parse_workflow(v: &Value, at: &str) -> Result<Workflow, ParseError> {
    let obj = v.as_object().ok_or_else(|| {
        err(
            at,
            "expected an n8n workflow: an object with `nodes` and `connections`",
        )
    })?;
    let nodes_path = join(at, "nodes");
    let raw_nodes = match obj.get("nodes") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(err(nodes_path, "must be an array of nodes")),
        None => {
            return Err(err(
                nodes_path,
                "is missing: this is not an n8n workflow export",
            ))
        }
    };
    let mut nodes = Vec::with_capacity(raw_nodes.len());
    let mut by_name: HashMap<String, usize> = HashMap::with_capacity(raw_nodes.len());
    for (i, n) in raw_nodes.iter().enumerate() {
        let path = format!("{nodes_path}[{i}]");
        let node = parse_node(n, &path)?;
        if by_name.insert(node.name.clone(), i).is_some() {
            return Err(err(
                join(&path, "name"),
                format!(
                    "two nodes are named {:?}: n8n names must be unique",
                    node.name
                ),
            ));
        }
        nodes.push(node);
    }
    let conn_path = join(at, "connections");
    let (edges, tools) = match obj.get("connections") {
        None | Some(Value::Null) => (Vec::new(), Vec::new()),
        Some(Value::Object(c)) => (
            parse_connections(c, &by_name, &conn_path)?,
            tool_links(c, &by_name),
        ),
        Some(_) => return Err(err(conn_path, "must be an object keyed by node name")),
    };
    let name = match obj.get("name") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => "(unnamed workflow)".to_owned(),
        Some(_) => return Err(err(join(at, "name"), "must be a string")),
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let error_workflow = obj
        .get("settings")
        .and_then(|s| s.get("errorWorkflow"))
        .and_then(|e| match e {
            Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
    Ok(Workflow {
        name,
        id,
        nodes,
        edges,
        tools,
        error_workflow,
    })
}

/// The `ai_tool` connections `(tool, agent)`, read leniently: a link of another shape or to a
/// node that does not exist is skipped (it attaches nothing in n8n either).
fn tool_links(c: &Map<String, Value>, by_name: &HashMap<String, usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (src, kinds) in c {
        let Some(&from) = by_name.get(src) else {
            continue;
        };
        let Some(Value::Array(outputs)) = kinds.get("ai_tool") else {
            continue;
        };
        for targets in outputs.iter().filter_map(Value::as_array) {
            for t in targets {
                if let Some(&to) = t
                    .get("node")
                    .and_then(Value::as_str)
                    .and_then(|n| by_name.get(n))
                {
                    if !out.contains(&(from, to)) {
                        out.push((from, to));
                    }
                }
            }
        }
    }
    out
}

fn parse_node(v: &Value, path: &str) -> Result<Node, ParseError> {
    let o = v
        .as_object()
        .ok_or_else(|| err(path, "a node must be an object"))?;
    let name = match o.get("name") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(err(join(path, "name"), "a node needs a string `name`")),
    };
    let node_type = match o.get("type") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err(err(
                join(path, "type"),
                format!("node {name:?} needs a string `type` (e.g. n8n-nodes-base.httpRequest)"),
            ))
        }
    };
    let version = match o.get("typeVersion") {
        None | Some(Value::Null) => 1.0,
        Some(Value::Number(n)) => n.as_f64().unwrap_or(1.0),
        Some(_) => {
            return Err(err(
                join(path, "typeVersion"),
                format!("node {name:?}: `typeVersion` must be a number"),
            ))
        }
    };
    let params = match o.get("parameters") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(err(
                join(path, "parameters"),
                format!("node {name:?}: `parameters` must be an object"),
            ))
        }
    };
    let flag = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
    let max_tries = o
        .get("maxTries")
        .and_then(|m| {
            m.as_f64()
                .or_else(|| m.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|m| m.is_finite() && *m >= 1.0)
        .map(|m| m.min(1000.0) as u32)
        .unwrap_or(3);
    let on_error = match o.get("onError").and_then(Value::as_str) {
        Some("continueErrorOutput") => OnError::ErrorOutput,
        Some("continueRegularOutput") => OnError::ContinueRegular,
        Some(_) => OnError::Stop,
        // Exports of old workflows carry `continueOnFail: true` instead.
        None if flag("continueOnFail") => OnError::ContinueRegular,
        None => OnError::Stop,
    };
    Ok(Node {
        name,
        node_type,
        version,
        params,
        disabled: flag("disabled"),
        retry_on_fail: flag("retryOnFail"),
        max_tries,
        on_error,
    })
}

fn parse_connections(
    c: &Map<String, Value>,
    by_name: &HashMap<String, usize>,
    path: &str,
) -> Result<Vec<Edge>, ParseError> {
    let mut edges = Vec::new();
    for (src, kinds) in c {
        // A connection from a node that does not exist is dropped, as n8n does.
        let Some(&from) = by_name.get(src) else {
            continue;
        };
        let Some(kinds) = kinds.as_object() else {
            return Err(err(
                format!("{path}.{src}"),
                "must be an object of connection types",
            ));
        };
        // Only `main` carries items from node to node; `ai_*` links attach tools and models.
        let Some(main) = kinds.get("main") else {
            continue;
        };
        let outputs = match main {
            Value::Array(a) => a,
            Value::Null => continue,
            _ => {
                return Err(err(
                    format!("{path}.{src}.main"),
                    "must be an array of outputs",
                ))
            }
        };
        for (output, targets) in outputs.iter().enumerate() {
            let targets = match targets {
                Value::Array(t) => t,
                Value::Null => continue,
                _ => {
                    return Err(err(
                        format!("{path}.{src}.main[{output}]"),
                        "must be an array of connections",
                    ))
                }
            };
            for (j, t) in targets.iter().enumerate() {
                let Some(target) = t.get("node").and_then(Value::as_str) else {
                    return Err(err(
                        format!("{path}.{src}.main[{output}][{j}]"),
                        "a connection needs a string `node`",
                    ));
                };
                if let Some(&to) = by_name.get(target) {
                    edges.push(Edge { from, output, to });
                }
            }
        }
    }
    Ok(edges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn member_order_changes_neither_the_parse_error_nor_the_workflow() {
        let nodes = r#"[{"name": "A", "type": "n8n-nodes-base.webhook", "parameters": {}},
                        {"name": "B", "type": "n8n-nodes-base.noOp", "parameters": {}}]"#;
        let bad_a = r#""A": {"main": [[{"nod": "B"}]]}"#;
        let bad_b = r#""B": {"main": [[{"x": 1}]]}"#;
        let doc = |first: &str, second: &str| -> Value {
            serde_json::from_str(&format!(
                r#"{{"nodes": {nodes}, "connections": {{{first}, {second}}}}}"#
            ))
            .expect("json")
        };
        let one = parse_document(&doc(bad_a, bad_b))
            .map(|_| ())
            .expect_err("bad");
        let two = parse_document(&doc(bad_b, bad_a))
            .map(|_| ())
            .expect_err("bad");
        assert_eq!(one.path, two.path);
        assert_eq!(one.path, "connections.A.main[0][0]");
    }

    #[test]
    fn reads_nodes_edges_and_settings() {
        let wf = parse_workflow(
            &json!({
                "id": "w1", "name": "W",
                "nodes": [
                    {"name": "A", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
                    {"name": "B", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
                     "retryOnFail": true, "onError": "continueErrorOutput", "parameters": {"method": "POST"}}
                ],
                "connections": {"A": {"main": [[{"node": "B", "type": "main", "index": 0}]]},
                                "Ghost": {"main": [[{"node": "A", "type": "main", "index": 0}]]}},
                "settings": {"errorWorkflow": "42"}
            }),
            "",
        )
        .unwrap();
        assert_eq!(wf.id.as_deref(), Some("w1"));
        assert_eq!(wf.error_workflow.as_deref(), Some("42"));
        assert_eq!(
            wf.edges,
            vec![Edge {
                from: 0,
                output: 0,
                to: 1
            }]
        );
        let b = &wf.nodes[1];
        assert!(b.retry_on_fail);
        assert_eq!(b.max_tries, 3);
        assert_eq!(b.on_error, OnError::ErrorOutput);
        assert_eq!(b.version, 4.2);
    }

    #[test]
    fn array_documents_name_the_bad_element() {
        let e =
            parse_document(&json!([{"nodes": [], "connections": {}}, {"nodes": [{"name": "X"}]}]))
                .unwrap_err();
        assert_eq!(e.path, "[1].nodes[0].type");
    }

    #[test]
    fn non_workflows_are_errors() {
        assert!(parse_document(&json!("hello")).is_err());
        assert_eq!(
            parse_document(&json!({"name": "x"})).unwrap_err().path,
            "nodes"
        );
        let dup = json!({"nodes": [{"name": "A", "type": "t"}, {"name": "A", "type": "t"}]});
        assert_eq!(parse_document(&dup).unwrap_err().path, "nodes[1].name");
    }
}
