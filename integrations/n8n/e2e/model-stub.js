#!/usr/bin/env node
// A chat model on loopback that speaks OpenAI's Chat Completions API (what n8n's OpenAI Chat
// Model node sends when its credential's Base URL points here), scripted like a model that
// regenerates its draft every time:
//   - a request whose conversation has no tool result yet → one tool call of the tool named
//     by STUB_TOOL (default: the first tool offered), with the JSON object found in the last
//     user message as identity (order_id, to) and a NEW text each time ("draft N");
//   - a request that carries the tool's result → a final answer quoting that result.
// GET /calls answers the tool calls it asked for, in order ([{order_id, to, text}, …]), so a
// test can tell which text the first execution generated. Streams (SSE) when asked to.
// Loopback only.   node model-stub.js --port-file FILE
'use strict';
const http = require('node:http');
const fs = require('node:fs');

const args = process.argv.slice(2);
const portFile = args[args.indexOf('--port-file') + 1];
const toolPattern = process.env.STUB_TOOL ? new RegExp(process.env.STUB_TOOL) : null;
const asked = [];
let seq = 0;

/** The text of a message's content (a string or a list of parts). */
function text(content) {
	if (typeof content === 'string') return content;
	if (Array.isArray(content)) return content.map((p) => (typeof p === 'string' ? p : p.text || '')).join('');
	return '';
}

/** The first JSON object written in `s`, or null. */
function firstObject(s) {
	for (let i = s.indexOf('{'); i >= 0; i = s.indexOf('{', i + 1)) {
		for (let j = s.lastIndexOf('}'); j > i; j = s.lastIndexOf('}', j - 1)) {
			try {
				const v = JSON.parse(s.slice(i, j + 1));
				if (v && typeof v === 'object' && !Array.isArray(v)) return v;
			} catch {
				// not this span
			}
		}
	}
	return null;
}

function toolName(tools) {
	const names = (tools || []).map((t) => (t.function ? t.function.name : t.name)).filter(Boolean);
	return (toolPattern && names.find((n) => toolPattern.test(n))) || names[0] || null;
}

/** The assistant message this stub answers for a Chat Completions request body. */
function reply(body) {
	const messages = Array.isArray(body.messages) ? body.messages : [];
	const lastUser = [...messages].reverse().find((m) => m.role === 'user');
	const userAt = messages.lastIndexOf(lastUser);
	const results = messages.slice(userAt + 1).filter((m) => m.role === 'tool');
	if (results.length > 0) {
		const said = text(results[results.length - 1].content).replace(/\s+/g, ' ').slice(0, 500);
		return { role: 'assistant', content: `Follow-up handled. The tool said: ${said}` };
	}
	const name = toolName(body.tools);
	const order = firstObject(text(lastUser && lastUser.content)) || {};
	if (!name || !order.order_id) {
		return { role: 'assistant', content: 'I have no tool to call or no order to act on.' };
	}
	const n = asked.length + 1;
	const call = {
		order_id: String(order.order_id),
		to: String(order.to || 'customer@example.com'),
		text: `Hello! Thank you for order ${order.order_id}. (draft ${n}, written ${new Date().toISOString()})`,
	};
	asked.push(call);
	return {
		role: 'assistant',
		content: null,
		tool_calls: [{ id: `call_${++seq}`, type: 'function', function: { name, arguments: JSON.stringify(call) } }],
	};
}

function completion(body, message) {
	return {
		id: `chatcmpl-stub-${++seq}`,
		object: 'chat.completion',
		created: Math.floor(Date.now() / 1000),
		model: body.model || 'stub',
		choices: [{ index: 0, message, finish_reason: message.tool_calls ? 'tool_calls' : 'stop', logprobs: null }],
		usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
	};
}

/** The same answer as Server-Sent Events chunks (stream: true). */
function streamed(res, body, message) {
	const id = `chatcmpl-stub-${++seq}`;
	const created = Math.floor(Date.now() / 1000);
	const model = body.model || 'stub';
	const chunk = (delta, finish) =>
		`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }] })}\n\n`;
	res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
	res.write(chunk({ role: 'assistant', content: '' }, null));
	if (message.tool_calls) {
		const tc = message.tool_calls.map((t, index) => ({ index, ...t }));
		res.write(chunk({ tool_calls: tc }, null));
		res.write(chunk({}, 'tool_calls'));
	} else {
		res.write(chunk({ content: message.content }, null));
		res.write(chunk({}, 'stop'));
	}
	if (body.stream_options && body.stream_options.include_usage) {
		res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 } })}\n\n`);
	}
	res.end('data: [DONE]\n\n');
}

const server = http.createServer((req, res) => {
	const url = new URL(req.url, 'http://127.0.0.1');
	const json = (code, v) => {
		res.writeHead(code, { 'content-type': 'application/json' });
		res.end(JSON.stringify(v));
	};
	if (req.method === 'GET' && url.pathname === '/calls') return json(200, asked);
	if (req.method === 'GET' && /\/models$/.test(url.pathname)) {
		return json(200, { object: 'list', data: [{ id: 'gpt-4o-mini', object: 'model', created: 0, owned_by: 'stub' }] });
	}
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		if (req.method !== 'POST' || !/\/chat\/completions$/.test(url.pathname)) {
			console.error(`model-stub: ${req.method} ${url.pathname} not served`);
			return json(404, { error: { message: `${req.method} ${url.pathname} is not served by the stub`, type: 'invalid_request_error' } });
		}
		let body;
		try {
			body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
		} catch {
			return json(400, { error: { message: 'body is not JSON', type: 'invalid_request_error' } });
		}
		const message = reply(body);
		console.error(`model-stub: ${message.tool_calls ? 'tool call ' + message.tool_calls[0].function.arguments : 'final answer'}`);
		if (body.stream) return streamed(res, body, message);
		json(200, completion(body, message));
	});
});
server.listen(0, '127.0.0.1', () => {
	const { port } = server.address();
	if (portFile) fs.writeFileSync(portFile, String(port));
	else console.log(port);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
