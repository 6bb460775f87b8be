// The held-out evaluations (RUN/eval_trajectories.jsonl): every evaluation's greedy episodes, browsable like a
// step's trajectories (one card per task, its map beside it), each marked seen or unseen in training when the
// run knows it, and every task's outcome across the evaluations (before and after).

const FILTERS = {all: () => true, failed: (t) => !t.success, solved: (t) => t.success,
  seen: (t) => t.eval && t.eval.seen === true, unseen: (t) => t.eval && t.eval.seen === false};

VIEWS.eval = async function evalView(main, r) {
  const k = Number(r.parts[1]);
  const ev = RUN.evals[k];
  if (!ev) { main.appendChild(h('p', {class: 'warn'}, `No evaluation ${r.parts[1]}.`)); return; }
  const s = 'e' + k;
  const trajs = await stepData(s);
  const show = FILTERS[r.q.get('show')] ? r.q.get('show') : 'all';
  main.appendChild(h('h1', null, `Evaluation "${ev.label}" (step ${ev.step}) `,
    RUN.evals[k - 1] ? h('a', {href: link('eval/' + (k - 1), {show}), class: 'small'}, '← previous') : '', ' ',
    RUN.evals[k + 1] ? h('a', {href: link('eval/' + (k + 1), {show}), class: 'small'}, 'next →') : ''));
  const seen = trajs.filter(FILTERS.seen), unseen = trajs.filter(FILTERS.unseen);
  const solved = (ts) => `${ts.filter((t) => t.success).length}/${ts.length}`;
  main.appendChild(h('div', {class: 'facts'}, badge('solved', solved(trajs), ev.ok ? 'good' : 'bad'),
    badge('mean reward', fmt(mean(trajs.map((t) => t.reward)))),
    seen.length ? badge('seen in training', solved(seen), 'seen') : null,
    unseen.length ? badge('never trained on', solved(unseen), 'unseen') : null));
  const names = ['all', 'failed', 'solved', ...(seen.length ? ['seen'] : []), ...(unseen.length ? ['unseen'] : [])];
  main.appendChild(h('p', {class: 'pick', id: 'eval-filter'}, 'show: ', names.map((n) =>
    h('a', {href: link('eval/' + k, {show: n}), class: n === show ? 'on' : ''}, n))));
  const cards = trajs.map((t, i) => [i, t]).filter(([, t]) => FILTERS[show](t)).map(([i, t]) => {
    const map = mapThumb(t.query);
    return h('a', {class: 'ecard ' + (t.success ? 'ok' : 'fail'), href: link(`traj/${s}/${i}`), data: {index: i}},
      map ? h('div', {class: 'map'}, map) : null,
      h('div', null, h('b', null, '#' + i), ' ', t.success ? '✓' : '✗', ' reward ', h('b', null, fmt(t.reward))),
      h('div', {class: 'small'}, t.task.id), seenBadge(t), h('div', null, turnStrip(t)),
      h('div', {class: 'acts'}, t.turns.slice(0, 8).map((u) => u.action.trim().slice(0, 16)).join(' · ')));
  });
  main.appendChild(h('div', {class: 'ecards', data: {cards: cards.length}}, cards));
};

VIEWS.evals = async function evals(main) {
  main.appendChild(h('h1', null, 'Evaluations'));
  if (!RUN.evals.length) {
    main.appendChild(h('p', null, 'This run logged no evaluation episodes (eval_trajectories.jsonl).'));
    return;
  }
  main.appendChild(evalEpisodesTable());
  // task by task: its map and its outcome in every evaluation, so that before and after read along a row
  const first = await stepData('e0');
  const tasks = [...new Set(RUN.evals.flatMap((ev) => ev.tasks.map((x) => x[0])))];
  main.appendChild(h('h2', null, 'Task by task'));
  main.appendChild(h('table', {class: 'task-matrix'},
    h('tr', null, h('th', null, 'task'), h('th', null, 'map'), RUN.evals.map((ev) => h('th', null, ev.label))),
    tasks.map((id) => {
      const t0 = first.find((t) => t.task.id === id);
      return h('tr', {class: 'task-row'}, h('td', null, id), h('td', null, t0 ? mapThumb(t0.query) : null),
        RUN.evals.map((ev) => {
          const j = ev.tasks.findIndex((x) => x[0] === id);
          if (j < 0) return h('td', null, '');
          const [, ok, seen] = ev.tasks[j];
          return h('td', {class: 'history'}, h('a', {href: link(`traj/e${ev.k}/${j}`), class: ok ? 'ok' : 'fail'},
            ok ? '✓' : '✗'), seen === null ? '' : seen ? ' seen' : ' unseen');
        }));
    })));
};
