//! IDEM017 (an agent's tool with a side effect, not behind idem).
//!
//! An AI Agent calls its tools when its model decides to: a retried, replayed or resumed
//! execution, or the model itself, calls a tool again, and no gate on the `main` path sits in
//! between. A tool attached through `ai_tool` writes when it is an HTTP Request tool with a
//! writing method, an app tool (`…Tool`, the app node's agent variant) whose resource and
//! operation write by the app's row of the catalog (mail, chat, CRM, sheet, database), or an
//! MCP Client Tool pointing at another MCP server than idem's `/mcp/{namespace}` (its tools
//! may write). Read-only tools (a GET, a calculator, code, a vector store) are not reported.

use std::sync::LazyLock;

use regex::Regex;

use super::Cx;
use crate::catalog;
use crate::expr;
use crate::model::{self, Role};
use crate::workflow::Node;
use crate::Finding;

/// idem's MCP endpoint: a path ending in `/mcp/{namespace}` with nothing after it (an
/// expression for the base URL or the namespace is fine; they are masked).
static IDEM_MCP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"/mcp/[^/\s]+/?$").expect("static regex"));

/// The MCP server URL of an MCP Client Tool (`endpointUrl` from 1.2, `sseEndpoint` before).
fn mcp_url(node: &Node) -> &str {
    node.str_param(&["endpointUrl"])
        .or_else(|| node.str_param(&["sseEndpoint"]))
        .unwrap_or("")
}

/// Whether `url` is idem's MCP endpoint of a namespace, read from the URL's path alone (a
/// `/mcp/…` in the query or the fragment is another server's URL).
pub fn is_idem_mcp(url: &str) -> bool {
    IDEM_MCP.is_match(&expr::url_path(url.trim()).1)
}

/// What a tool node changes in the world, for the message; `None` for a read-only tool.
fn side_effect(node: &Node) -> Option<String> {
    let t = node.node_type.as_str();
    if t == catalog::MCP_CLIENT_TOOL {
        let url = mcp_url(node);
        return (!is_idem_mcp(url)).then(|| "the tools of another MCP server".to_owned());
    }
    if t == catalog::LANGCHAIN_HTTP_TOOL {
        let method = node.str_param(&["method"]).unwrap_or("GET");
        let writes = method.starts_with('=')
            || catalog::WRITING_METHODS.contains(&method.to_ascii_uppercase().as_str());
        return writes.then(|| format!("HTTP {}", method.trim_start_matches('=')));
    }
    // An app's tool variant reads like the app node itself.
    let base = if t == catalog::HTTP_REQUEST_TOOL {
        catalog::HTTP_REQUEST.to_owned()
    } else {
        let b = t.strip_suffix("Tool")?;
        catalog::effect_spec(b)?;
        b.to_owned()
    };
    let as_node = Node {
        node_type: base,
        ..node.clone()
    };
    match model::role(&as_node, &[]) {
        Role::Effect(e) => Some(e.what),
        _ => None,
    }
}

/// IDEM017 agent-tool-side-effect, named at the tool node.
pub fn idem017(cx: &Cx) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut links = cx.wf().tools.clone();
    // In the workflow's node order.
    links.sort_unstable();
    for (tool, agent) in links {
        let node = cx.node(tool);
        if node.disabled || seen.contains(&tool) {
            continue;
        }
        let Some(what) = side_effect(node) else {
            continue;
        };
        seen.push(tool);
        out.push(cx.finding(
            "IDEM017",
            Some(tool),
            format!(
                "'{}' ({what}) is a tool of the agent '{}': the agent may call it twice — a retried or resumed execution, or the model itself, calls it again, and nothing dedupes the second call.",
                cx.name(tool),
                cx.name(agent)
            ),
            format!(
                "Declare the side effect of '{}' as an idem action (keyed by the business identity of its arguments) and give the agent an MCP Client Tool pointing at idem's /mcp/{{namespace}} instead.",
                cx.name(tool)
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{check, nodes_of};

    #[test]
    fn idem017_names_each_writing_tool_of_an_agent() {
        let f = check(
            idem017,
            include_str!("../../tests/fixtures/idem017-agent-tools.json"),
        );
        assert_eq!(
            nodes_of(&f),
            [
                "Send email",
                "Post to Slack",
                "Create order (HTTP)",
                "Call API (legacy HTTP tool)",
                "Append row",
                "Insert row",
                "Other MCP server",
            ]
        );
        assert!(f.iter().all(|x| x.message.contains("'AI Agent'")));
        assert!(
            f[0].message.contains("Gmail message:send"),
            "{}",
            f[0].message
        );
        assert!(f[2].message.contains("HTTP POST"), "{}", f[2].message);
        assert!(f.iter().all(|x| x.severity == crate::Severity::Warning));
    }

    #[test]
    fn idem017_near_miss_read_only_tools_and_idem_behind_mcp() {
        let near = include_str!("../../tests/fixtures/idem017-near-miss-read-only-tools.json");
        assert!(check(idem017, near).is_empty());
    }

    /// An MCP Client Tool whose URL only carries idem's `/mcp/{namespace}` in its query or
    /// fragment is another server's: reported.
    #[test]
    fn idem017_reads_the_mcp_url_path_only() {
        let wf = |url: &str| {
            serde_json::json!({"name": "agent", "nodes": [
                {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
                {"name": "AI Agent", "type": "@n8n/n8n-nodes-langchain.agent", "typeVersion": 1.7, "parameters": {}},
                {"name": "Tools", "type": catalog::MCP_CLIENT_TOOL, "typeVersion": 1.2,
                 "parameters": {"endpointUrl": url}}
            ], "connections": {
                "Hook": {"main": [[{"node": "AI Agent", "type": "main", "index": 0}]]},
                "Tools": {"ai_tool": [[{"node": "AI Agent", "type": "ai_tool", "index": 0}]]}
            }})
            .to_string()
        };
        for url in [
            "https://evil.example/tools?x=/mcp/shop",
            "https://evil.example/tools#/mcp/shop",
        ] {
            assert_eq!(nodes_of(&check(idem017, &wf(url))), ["Tools"], "{url}");
        }
        for url in [
            "https://idem.example/mcp/shop",
            "={{ $vars.IDEM_URL }}/mcp/{{ $vars.NS }}",
        ] {
            assert!(check(idem017, &wf(url)).is_empty(), "{url}");
        }
    }

    #[test]
    fn idem_mcp_urls_are_told_from_other_mcp_servers() {
        for url in [
            "http://127.0.0.1:7780/mcp/shop",
            "={{ $vars.IDEM_URL }}/mcp/shop",
            "https://idem.internal/mcp/agents/",
            "={{ $vars.IDEM_URL }}/mcp/{{ $vars.NAMESPACE }}",
            "https://idem.internal/mcp/shop?session=1",
            "=https://idem.internal/mcp/{{ $json.ns ? $json.ns : 'shop' }}",
        ] {
            assert!(is_idem_mcp(url), "{url}");
        }
        for url in [
            "https://mcp.example.com/mcp",
            "https://mcp.example.com/sse",
            "https://mcp.example.com/mcp/shop/tools",
            // idem's path in the query or the fragment of another server's URL.
            "https://evil.example/tools?x=/mcp/shop",
            "https://evil.example/tools#/mcp/shop",
            "=https://evil.example/tools?ns={{ $vars.NS }}&x=/mcp/shop",
            "https://mcp/shop",
            "",
        ] {
            assert!(!is_idem_mcp(url), "{url}");
        }
    }
}
