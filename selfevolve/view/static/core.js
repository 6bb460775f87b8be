// selfevolve view: the shared parts (DOM helpers, data access, routing, colour scales).
// All run text reaches the page as text nodes or attribute values set through the DOM API: nothing from the
// run folder is ever parsed as HTML (no innerHTML anywhere), so a reply holding markup shows as that markup.
'use strict';

const RUN = JSON.parse(document.getElementById('run-data').textContent);
const cache = {steps: new Map(), trees: new Map(), evals: new Map()};
const selected = new Set(); // trajectories chosen for export, as "step/index"

// ---- DOM ------------------------------------------------------------------------------------------------
function add(el, kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) add(el, k);
    else el.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

// h('a', {class: 'x', href: '#/', onclick: f, style: {color: 'red'}, data: {n: 3}}, 'text', child, ...)
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  return add(el, kids);
}

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(el, attrs);
  return add(el, kids);
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'style') Object.assign(el.style, v); // CSSOM: allowed by the page's content policy
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function details(summary, body, open) {
  return h('details', {open: !!open}, h('summary', null, summary), body);
}

function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  const d = digits === undefined ? 3 : digits;
  if (Math.abs(x) < 1e-12) return '0'; // rounding noise of a sum (0.1 + 0.2 - 0.3), not a value
  if (Math.abs(x) >= 1e4 || Math.abs(x) < 10 ** -d) return x.toExponential(2);
  return (Math.round(x * 10 ** d) / 10 ** d).toString();
}

function signed(x) {
  return x === null || x === undefined ? '–' : (x > 0 ? '+' : '') + fmt(x);
}

function badge(label, value, cls) {
  return h('span', {class: 'badge ' + (cls || '')}, h('b', null, label), ' ', value);
}

function mean(xs) {
  const v = xs.filter((x) => x !== null && x !== undefined);
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
}

// ---- data: embedded <script type="application/json"> blocks, or the server's /data/ (selfevolve view --serve)
async function loadJSON(kind, step) {
  const store = cache[kind];
  if (store.has(step)) return store.get(step);
  let data = [];
  if (RUN.mode === 'serve') {
    const r = await fetch(`data/${kind}/${step}.json`);
    if (r.ok) data = await r.json();
  } else {
    const el = document.getElementById(`${kind}-${step}`); // parsed only when first needed (lazy)
    if (el) data = JSON.parse(el.textContent);
  }
  store.set(step, data);
  return data;
}
// A "source" of trajectories: a training step (a number) or a held-out evaluation ("e" and its number, "e2"),
// so that the trajectory and compare views show both alike.
const isEval = (s) => typeof s === 'string' && /^e\d+$/.test(s);
const parseSource = (x) => (/^e\d+$/.test(x || '') ? x : Number(x));
const evalOf = (s) => RUN.evals[Number(s.slice(1))] || null;
const stepData = (s) => (isEval(s) ? loadJSON('evals', Number(s.slice(1))) : loadJSON('steps', s));
const treeData = (s) => loadJSON('trees', s);
const sourceLink = (s) => link(isEval(s) ? 'eval/' + s.slice(1) : 'step/' + s);

function sourceName(s) {
  if (!isEval(s)) return 'step ' + s;
  const ev = evalOf(s);
  return ev ? `evaluation "${ev.label}" (step ${ev.step})` : 'evaluation ' + s.slice(1);
}

async function getTraj(s, i) {
  const trajs = await stepData(s);
  return trajs[i] || null;
}

const key = (s, i) => `${s}/${i}`;

// ---- routing: the location hash is the whole view state, so every view has a URL (tests open them too) ----
function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  return {parts: (path || '').split('/').filter(Boolean), q: new URLSearchParams(query || '')};
}

function link(path, params) {
  const q = params ? new URLSearchParams(Object.entries(params).filter(([, v]) => v !== '' && v !== null &&
    v !== undefined)).toString() : '';
  return '#/' + path + (q ? '?' + q : '');
}

function go(path, params) {
  location.hash = link(path, params);
}

// ---- colour scales of the token view and the charts ------------------------------------------------------
const SCALES = {
  logprob: {
    label: 'probability of the sampled token',
    value: (tok, k) => tok.logprob[k] === null ? null : Math.exp(tok.logprob[k]),
    colour: (p) => `hsl(${Math.round(120 * p)}, 75%, ${Math.round(88 - 18 * (1 - p))}%)`,
    legend: [[0, '0'], [0.5, '0.5'], [1, '1']],
  },
  entropy: {
    label: 'entropy of the next-token distribution (nats)',
    value: (tok, k) => tok.entropy[k],
    colour: (e, top) => `hsl(30, 95%, ${Math.round(97 - 47 * Math.min(1, e / top))}%)`,
    legend: null, // from the maximum in view
  },
  advantage: {
    label: 'advantage of the token (its turn\'s, as trained)',
    value: (tok, k, adv) => adv,
    colour: (a, top) => {
      const x = Math.min(1, Math.abs(a) / top);
      return a >= 0 ? `hsl(140, 60%, ${Math.round(96 - 40 * x)}%)` : `hsl(0, 75%, ${Math.round(96 - 36 * x)}%)`;
    },
    legend: null,
  },
};

function scaleTop(mode, values) {
  const v = values.filter((x) => x !== null && x !== undefined).map(Math.abs);
  return Math.max(mode === 'entropy' ? 1 : 1e-6, ...v);
}

function legend(mode, top) {
  const sc = SCALES[mode];
  const stops = sc.legend || (mode === 'entropy' ? [[0, '0'], [top / 2, fmt(top / 2, 2)], [top, fmt(top, 2)]]
    : [[-top, fmt(-top, 2)], [0, '0'], [top, '+' + fmt(top, 2)]]);
  return h('span', {class: 'legend'}, sc.label + ': ',
    stops.map(([v, label]) => h('span', {class: 'swatch', style: {background: sc.colour(v, top)}}, label)));
}

// ---- page frame -------------------------------------------------------------------------------------------
const VIEWS = {};

function topBar() {
  const r = route();
  const here = r.parts[0] === 'eval' ? 'evals' : r.parts[0] || '';
  const tab = (path, label) => h('a', {href: '#/' + path, class: here === path ? 'on' : ''}, label);
  return h('header', null, h('span', {class: 'brand'}, 'selfevolve view'), h('span', {class: 'run'}, RUN.name),
    h('nav', null, tab('', 'Summary'), tab('list', 'Trajectories'), tab('steps', 'Steps'),
      RUN.evals.length ? tab('evals', 'Evaluations') : null), h('span', {id: 'status'}));
}

function status(msg) {
  const el = document.getElementById('status');
  if (el) el.textContent = msg;
}

let rendering = 0;
async function render() {
  const ticket = ++rendering;
  const t0 = performance.now();
  const r = route();
  const name = r.parts[0] || '';
  const main = h('main', {id: 'view', data: {view: name || 'summary'}});
  try {
    await (VIEWS[name] || VIEWS[''])(main, r);
  } catch (e) {
    main.replaceChildren(h('p', {class: 'warn'}, 'This view failed: ' + e));
  }
  if (ticket !== rendering) return; // a newer hash change won
  document.getElementById('app').replaceChildren(topBar(), main);
  if (!document.documentElement.dataset.readyMs) {
    // time from navigation start until the first view is on screen (benchmarks/bench_viewer.py reads it)
    document.documentElement.dataset.readyMs = String(Math.round(performance.now()));
  }
  document.documentElement.dataset.ready = String(ticket);
  document.documentElement.dataset.renderMs = String(Math.round(performance.now() - t0)); // this view alone
}

window.addEventListener('hashchange', render);

// ---- grid observations (FrozenLake, Sokoban): rows of one-character cells separated by spaces --------------
// Drawn as a grid of squares, so that a row of "_" cells is a row of ice, not something that looks like a blank
// line; the text around the grid (FrozenLake's hint line) stays text.
const PALETTES = {
  frozenlake: {'_': ['#e3f0fb', '#9db4c8'], O: ['#1d3557', '#fff'], G: ['#43a047', '#fff'], P: ['#2457c5', '#fff'],
    X: ['#c62828', '#fff'], '√': ['#1a7f37', '#fff'], T: ['#f0c36d', '#1d2330']},
  sokoban: {'#': ['#5b6270', '#5b6270'], '_': ['#f3efe6', '#c9c2b2'], O: ['#f6d98b', '#8a6d1f'], X: ['#b7791f', '#fff'],
    '√': ['#1a7f37', '#fff'], P: ['#2457c5', '#fff'], S: ['#2457c5', '#f6d98b'], T: ['#f6d98b', '#8a6d1f']},
};
const GRID_ROW = /^\S( \S)+$/;

function gridOf(textIn) {
  // {before, rows, after}: the longest block of at least 2 grid rows of one width, or null
  const lines = (textIn || '').split('\n');
  let best = null;
  for (let a = 0; a < lines.length; a++) {
    if (!GRID_ROW.test(lines[a])) continue;
    let b = a + 1;
    while (b < lines.length && GRID_ROW.test(lines[b]) && lines[b].length === lines[a].length) b++;
    if (b - a >= 2 && (!best || b - a > best[1] - best[0])) best = [a, b];
    a = b - 1;
  }
  if (!best) return null;
  return {before: lines.slice(0, best[0]).join('\n'), rows: lines.slice(best[0], best[1]).map((l) => l.split(' ')),
    after: lines.slice(best[1]).join('\n')};
}

function gridTable(rows, small) {
  const pal = PALETTES[(RUN.config.env || {}).name] || {};
  return h('table', {class: 'grid' + (small ? ' small' : ''), data: {rows: rows.length, cols: rows[0].length}},
    rows.map((row) => h('tr', null, row.map((c) => {
      const [bg, fg] = pal[c] || ['#fff', '#1d2330'];
      return h('td', {style: {background: bg, color: fg}}, c);
    }))));
}

function obsView(textIn, cls) {
  // an observation: its grid drawn, the rest as text; without a grid the text alone (a <pre>, as before)
  const g = gridOf(textIn);
  if (!g) return h('pre', {class: cls}, textIn);
  return h('div', {class: cls + ' gridobs'}, g.before ? h('pre', null, g.before) : null, gridTable(g.rows),
    g.after ? h('pre', null, g.after) : null);
}

function mapThumb(textIn) {
  // the map of a task (its first observation) as a small grid; null when the observation has none
  const g = gridOf(textIn);
  return g ? gridTable(g.rows, true) : null;
}
