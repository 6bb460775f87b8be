// A step's groups side by side, one trajectory turn by turn (prompt, reply tokens, tool call, observation,
// credit), and two trajectories side by side (best against worst of a group).

function groupsOf(trajs) {
  const groups = new Map();
  trajs.forEach((t, i) => {
    if (!groups.has(t.group)) groups.set(t.group, []);
    groups.get(t.group).push([i, t]);
  });
  return groups;
}

function turnEnd(t, u, k) {
  // how a turn ended the episode: won, lost (e.g. a hole), or cut by the turn limit; null if it went on
  if (k !== t.turns.length - 1 || !u.done) return null;
  return t.success ? 'win' : u.info.truncated === true ? 'cut' : 'lose';
}

function turnStrip(t) {
  // one square per turn: blue a valid move, grey an invalid reply, then the end: green won, red lost, outlined cut
  return h('span', {class: 'strip'}, t.turns.map((u, k) => h('span', {
    class: 'sq ' + (turnEnd(t, u, k) || (u.valid ? 'move' : 'invalid')) + (u.valid ? '' : ' invalid'),
    title: `turn ${k + 1}: reward ${fmt(u.reward)}${u.valid ? '' : ' (invalid)'}${turnEnd(t, u, k) ? ', ' + turnEnd(t, u, k) : ''}`})));
}

VIEWS.step = async function step(main, r) {
  const s = Number(r.parts[1]);
  const trajs = await stepData(s);
  const steps = RUN.steps;
  const at = steps.indexOf(s);
  main.appendChild(h('h1', null, `Step ${s} `,
    at > 0 ? h('a', {href: link('step/' + steps[at - 1]), class: 'small'}, '← previous') : '', ' ',
    at >= 0 && at + 1 < steps.length ? h('a', {href: link('step/' + steps[at + 1]), class: 'small'}, 'next →') : ''));
  const metrics = RUN.metrics.find((m) => m.step === s);
  if (metrics) {
    main.appendChild(h('div', {class: 'facts'}, ['reward/mean', 'success/rate', 'valid/rate', 'loss/policy', 'entropy']
      .filter((k) => k in metrics).map((k) => badge(k, fmt(metrics[k])))));
  }
  const cols = [];
  for (const [g, members] of groupsOf(trajs)) {
    const sorted = [...members].sort((a, b) => b[1].reward - a[1].reward);
    const best = sorted[0], worst = sorted[sorted.length - 1];
    const tree = members.map(([, t]) => t.search && t.search.tree).find((x) => x !== null && x !== undefined);
    const map = mapThumb(members[0][1].query); // the group's task: every member starts from this map
    cols.push(h('section', {class: 'group', data: {group: g}},
      map ? h('div', {class: 'map'}, map) : null,
      h('h3', null, members[0][1].task.id || g),
      h('div', {class: 'small'}, `${members.length} trajectories · mean reward ${fmt(mean(members.map(([, t]) => t.reward)))}`),
      h('div', {class: 'small'}, h('a', {href: link(`compare/${s}/${best[0]}/${s}/${worst[0]}`)}, 'best vs worst'),
        tree !== undefined ? [' · ', h('a', {href: link(`tree/${s}/${tree}`)}, 'search tree')] : ''),
      sorted.map(([i, t]) => h('a', {class: 'card ' + (t.success ? 'ok' : 'fail'), href: link(`traj/${s}/${i}`),
        data: {index: i}},
      h('div', null, h('b', null, '#' + i), ' reward ', h('b', null, fmt(t.reward)), ' ', t.success ? '✓' : '✗'),
      h('div', {class: 'small'}, 'advantage ', signed(t.advantages.length ? t.advantages[0] : null),
        t.values.length ? ` · V(s₀) ${fmt(t.values[0])}` : '', ` · ${t.turns.length} turns`),
      turnStrip(t),
      h('div', {class: 'acts'}, t.turns.slice(0, 6).map((u) => u.action.trim().slice(0, 24)).join(' · '))))));
  }
  main.appendChild(h('div', {class: 'groups', data: {groups: cols.length}}, cols));
};

// ---- token view -------------------------------------------------------------------------------------------
function tokenView(u, adv, mode, top) {
  const tok = u.tokens;
  if (!tok || !tok.text.length) return h('pre', {class: 'reply'}, u.action);
  const sc = SCALES[mode];
  return h('pre', {class: 'reply tokens', data: {tokens: tok.text.length}}, tok.text.map((piece, k) => {
    const v = sc.value(tok, k, adv);
    const tip = `${JSON.stringify(piece)}\nlog-prob ${fmt(tok.logprob[k])} (p ${fmt(tok.logprob[k] === null ? null :
      Math.exp(tok.logprob[k]))})\nentropy ${fmt(tok.entropy[k])}\nadvantage ${signed(adv)}`;
    return h('span', {class: 'tok', title: tip, style: v === null || v === undefined ? null : {background: sc.colour(v, top)}},
      piece === '' ? '\u200b' : piece);
  }));
}

function tokenTop(ts, mode) {
  // one scale for everything on screen, so colours compare across turns and across the two sides of a compare
  const vals = [];
  for (const t of ts) {
    t.turns.forEach((u, k) => {
      if (mode === 'advantage') vals.push(t.advantages[k]);
      else if (mode === 'entropy' && u.tokens) vals.push(...u.tokens.entropy);
    });
  }
  return scaleTop(mode, vals);
}

function modeSwitch(r, mode, top) {
  const here = r.parts.join('/');
  return h('div', {class: 'modes', id: 'token-modes'}, 'colour tokens by: ',
    Object.keys(SCALES).map((m) => h('a', {href: link(here, {...Object.fromEntries(r.q), tok: m}),
      class: m === mode ? 'on' : ''}, m)), ' ',
    legend(mode, top));
}

// ---- one trajectory ---------------------------------------------------------------------------------------
function fullPrompts(t) {
  // a prompt stored as a tail continues the previous turn's prompt (the full-history chat)
  const out = [];
  t.turns.forEach((u, k) => {
    if (!u.prompt) out.push(null);
    else out.push(u.prompt.extends && k > 0 && out[k - 1] !== null ? out[k - 1] + u.prompt.text : u.prompt.text);
  });
  return out;
}

function poolItem(id) {
  const it = RUN.pool[id];
  if (!it) return h('li', null, `pool item ${id} (not in experience.sqlite)`);
  return h('li', null, details(`${it.kind} #${id} · ${it.origin}, step ${it.step}${it.intent ? ' · ' + it.intent : ''}`,
    h('pre', null, it.text)));
}

function judgeLabel(a) {
  // reward.attribution's GOOD/BAD label of the step (info.attribution = {label, rationale, source, ...})
  if (!a || typeof a !== 'object' || typeof a.label !== 'string') return null;
  const good = a.label.toUpperCase() === 'GOOD';
  return h('span', {title: typeof a.rationale === 'string' ? a.rationale : ''},
    badge(`step label${typeof a.source === 'string' ? ' (' + a.source + ')' : ''}`, a.label, good ? 'good' : 'bad'));
}

function turnCard(t, u, k, prompt, mode, top, compact, openPrompt) {
  const adv = t.advantages[k];
  const value = t.values[k];
  // no advantage badge where the trajectory has none (an evaluation's episodes, a group filtered out)
  const heads = [badge('reward', fmt(u.reward)), t.advantages.length ? badge('advantage', signed(adv)) : null,
    badge('uncertainty', fmt(u.uncertainty)), value !== undefined ? badge('value', fmt(value)) : null,
    u.valid ? badge('valid', 'yes', 'good') : badge('valid', 'no', 'bad'), u.done ? badge('done', '') : null,
    u.state_key ? badge('state', u.state_key) : null, judgeLabel(u.info.attribution)];
  return h('section', {class: 'turn' + (u.valid ? '' : ' invalid'), data: {turn: k}},
    h('h3', null, `Turn ${k + 1}`), h('div', {class: 'facts'}, heads),
    compact ? null : details('prompt as the model saw it' + (prompt === null ? ' (not recorded)' : ' (its end: scroll up for the start)'),
      // shown from its end, where the current observation is (the system prompt is at its start)
      h('div', {class: 'scroll-end'}, h('pre', {class: 'prompt'}, prompt === null ?
        'Not recorded: train.log_prompts was off, or the run predates it.' : prompt)), openPrompt),
    u.calls.length ? details(`${u.calls.length} context call(s)`, u.calls.map((c) => h('pre', null, `[${c.purpose}] ${c.text}`))) : null,
    u.recalled.length ? details(`recalled experience (${u.recalled.length})`, h('ul', null, u.recalled.map(poolItem))) : null,
    u.stripped ? details('stripped from the training prompt', h('pre', null, u.stripped)) : null,
    h('div', {class: 'label'}, 'reply'), tokenView(u, adv, mode, top),
    u.tool_call ? h('div', {class: 'tool'}, h('span', {class: 'label'}, 'tool call '), h('b', null, u.tool_call.name),
      h('pre', null, JSON.stringify(u.tool_call.arguments, null, 1))) : null,
    h('div', {class: 'label'}, u.tool_call ? 'tool result' : 'observation'), obsView(u.observation, 'obs'),
    compact ? null : details('info', h('pre', null, JSON.stringify(u.info, null, 1))));
}

function seenBadge(t) {
  // whether an evaluation task's content was trained on (null: not known, no badge)
  const seen = t.eval ? t.eval.seen : null;
  if (seen === null || seen === undefined) return null;
  return seen ? badge('seen', 'in training', 'seen') : badge('unseen', 'never trained on', 'unseen');
}

function trajHeader(t, s, i) {
  const where = isEval(s) ? badge('evaluation', `${t.eval.label}, step ${t.eval.step}`) : badge('step', s);
  const facts = [where, seenBadge(t), badge('group', t.group), badge('task', t.task.id), badge('reward', fmt(t.reward)),
    badge('success', t.success ? 'yes' : 'no', t.success ? 'good' : 'bad'), badge('turns', t.turns.length)];
  if (t.shaped_reward !== null) facts.push(badge('shaped reward', fmt(t.shaped_reward)));
  if (t.judge_score !== null) facts.push(badge('judge', fmt(t.judge_score)));
  if (t.values.length > t.turns.length) facts.push(badge('V(final)', fmt(t.values[t.turns.length])));
  if (t.intent) facts.push(badge('intent', t.intent));
  if (t.search) facts.push(h('a', {href: link(`tree/${s}/${t.search.tree}`, {node: t.search.node})},
    badge('search', `${t.search.strategy} tree ${t.search.tree}, node ${t.search.node}`)));
  return h('div', {class: 'facts'}, facts);
}

function trajBody(t, s, i, r, mode, top, compact) {
  const prompts = fullPrompts(t);
  return [
    trajHeader(t, s, i),
    t.system ? details('system prompt', h('pre', null, t.system)) : null,
    t.query ? details('task (first observation)', obsView(t.query, 'query'), !compact) : null,
    t.reference ? details('reference solution', h('pre', null, t.reference)) : null,
    t.judge_reply ? details('judge reply', h('pre', null, t.judge_reply)) : null,
    t.insights.length ? details(`insights shown (${t.insights.length}, stripped from the training sample)`,
      h('ul', null, t.insights.map(poolItem))) : null,
    Object.keys(t.flags).length ? details('other flags', h('pre', null, JSON.stringify(t.flags, null, 1))) : null,
    h('div', {class: 'turns', data: {turns: t.turns.length}},
      t.turns.map((u, k) => turnCard(t, u, k, prompts[k], mode, top, compact, r.q.get('prompts') === 'open'))),
  ];
}

function sameTask(t, s, i) {
  // an evaluation's episode: the same task in the run's other evaluations, each a link to the two side by side
  const others = [];
  for (const ev of RUN.evals) {
    const j = ev.tasks.findIndex((x) => x[0] === t.task.id);
    if (j < 0 || 'e' + ev.k === s) continue;
    others.push(h('a', {href: link(`compare/e${ev.k}/${j}/${s}/${i}`), class: ev.tasks[j][1] ? 'ok' : 'fail'},
      `${ev.label} ${ev.tasks[j][1] ? '✓' : '✗'}`));
  }
  return others.length ? h('p', {class: 'history'}, 'The same task in the other evaluations (side by side): ',
    others.flatMap((a, k) => (k ? [' · ', a] : [a]))) : null;
}

VIEWS.traj = async function traj(main, r) {
  const s = parseSource(r.parts[1]), i = Number(r.parts[2]);
  const t = await getTraj(s, i);
  if (!t) { main.appendChild(h('p', {class: 'warn'}, `No trajectory ${i} in ${sourceName(s)}.`)); return; }
  const mode = SCALES[r.q.get('tok')] ? r.q.get('tok') : 'logprob';
  const top = tokenTop([t], mode);
  // neighbours: the other members of the group; in an evaluation (one greedy episode per task) the other episodes
  const members = (await stepData(s)).map((x, j) => [j, x]).filter(([, x]) => isEval(s) || x.group === t.group);
  const pos = members.findIndex(([j]) => j === i);
  const within = isEval(s) ? '' : ' in group';
  const nav = (d, label) => (members[pos + d] ? h('a', {href: link(`traj/${s}/${members[pos + d][0]}`, {tok: mode})}, label) : '');
  main.appendChild(h('h1', null, `${isEval(s) ? 'Episode' : 'Trajectory'} ${i} of ${sourceName(s)} `,
    h('span', {class: 'small'}, nav(-1, '← previous' + within), ' ', h('a', {href: sourceLink(s)}, sourceName(s)), ' ',
      nav(1, `next${within} →`))));
  if (isEval(s)) main.appendChild(sameTask(t, s, i));
  main.appendChild(modeSwitch(r, mode, top));
  main.appendChild(add(h('div', {class: 'traj'}), trajBody(t, s, i, r, mode, top, false)));
};

VIEWS.compare = async function compare(main, r) {
  const [s1, i1, s2, i2] = r.parts.slice(1).map(parseSource);
  const a = await getTraj(s1, i1), b = await getTraj(s2, i2);
  if (!a || !b) { main.appendChild(h('p', {class: 'warn'}, 'No such trajectories.')); return; }
  const mode = SCALES[r.q.get('tok')] ? r.q.get('tok') : 'logprob';
  const top = tokenTop([a, b], mode);
  main.appendChild(h('h1', null, 'Side by side'));
  main.appendChild(modeSwitch(r, mode, top));
  const side = (t, s, i) => h('div', {class: 'side'}, h('h2', null, h('a', {href: link(`traj/${s}/${i}`)}, `${sourceName(s)} · #${i}`),
    ` reward ${fmt(t.reward)}`), trajBody(t, s, i, r, mode, top, true));
  main.appendChild(h('div', {class: 'compare'}, side(a, s1, i1), side(b, s2, i2)));
};
