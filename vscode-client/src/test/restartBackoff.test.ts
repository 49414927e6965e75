import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RestartBackoff } from '../restartBackoff';

describe('restart back-off', () => {
  it('waits 1, 2, 4, 8, 16 s and then gives up', () => {
    const b = new RestartBackoff(5, 1000, 60_000);
    const delays: (number | undefined)[] = [];
    let now = 0;
    for (let i = 0; i < 7; i++) {
      b.started(now);
      now += 100;
      delays.push(b.crashed(now));
    }
    assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, undefined, undefined]);
  });

  it('starts counting again after the server ran for a while, or after a manual restart', () => {
    const b = new RestartBackoff(2, 1000, 60_000);
    b.started(0);
    assert.equal(b.crashed(10), 1000);
    b.started(10);
    assert.equal(b.crashed(20), 2000);
    b.started(20);
    assert.equal(b.crashed(70_020), 1000); // ran for 70 s: a fresh series
    b.reset();
    b.started(0);
    assert.equal(b.crashed(1), 1000);
  });
});
