// selfevolve view: the shared parts (DOM helpers, data access, routing, colour scales).
// All run text reaches the page as text nodes or attribute values set through the DOM API: nothing from the
// run folder is ever parsed as HTML (no innerHTML anywhere), so a reply holding markup shows as that markup.
'use strict';

const RUN = JSON.parse(document.getElementById('run-data').textContent);
const cache = {steps: new Map(), trees: new Map()};
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
const stepData = (s) => loadJSON('steps', s);
const treeData = (s) => loadJSON('trees', s);

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
  const tab = (path, label) => h('a', {href: '#/' + path, class: (r.parts[0] || '') === path ? 'on' : ''}, label);
  return h('header', null, h('span', {class: 'brand'}, 'selfevolve view'), h('span', {class: 'run'}, RUN.name),
    h('nav', null, tab('', 'Summary'), tab('list', 'Trajectories'), tab('steps', 'Steps')), h('span', {id: 'status'}));
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
