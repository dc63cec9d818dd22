\set a1 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a1;
\set a2 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a2;
\set a3 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a3;
\set a4 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a4;
\set a5 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a5;
\set a6 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a6;
\set a7 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a7;
\set a8 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a8;
\set a9 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a9;
\set a10 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a10;
\set a11 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a11;
\set a12 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a12;
\set a13 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a13;
\set a14 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a14;
\set a15 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a15;
\set a16 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a16;
\set a17 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a17;
\set a18 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a18;
\set a19 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a19;
\set a20 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a20;
\set a21 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a21;
\set a22 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a22;
\set a23 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a23;
\set a24 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a24;
\set a25 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a25;
\set a26 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a26;
\set a27 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a27;
\set a28 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a28;
\set a29 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a29;
\set a30 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a30;
\set a31 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a31;
\set a32 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a32;
\set a33 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a33;
\set a34 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a34;
\set a35 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a35;
\set a36 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a36;
\set a37 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a37;
\set a38 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a38;
\set a39 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a39;
\set a40 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a40;
\set a41 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a41;
\set a42 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a42;
\set a43 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a43;
\set a44 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a44;
\set a45 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a45;
\set a46 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a46;
\set a47 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a47;
\set a48 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a48;
\set a49 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a49;
\set a50 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a50;
\set a51 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a51;
\set a52 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a52;
\set a53 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a53;
\set a54 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a54;
\set a55 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a55;
\set a56 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a56;
\set a57 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a57;
\set a58 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a58;
\set a59 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a59;
\set a60 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a60;
\set a61 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a61;
\set a62 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a62;
\set a63 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a63;
\set a64 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a64;
\set a65 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a65;
\set a66 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a66;
\set a67 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a67;
\set a68 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a68;
\set a69 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a69;
\set a70 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a70;
\set a71 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a71;
\set a72 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a72;
\set a73 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a73;
\set a74 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a74;
\set a75 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a75;
\set a76 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a76;
\set a77 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a77;
\set a78 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a78;
\set a79 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a79;
\set a80 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a80;
\set a81 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a81;
\set a82 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a82;
\set a83 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a83;
\set a84 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a84;
\set a85 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a85;
\set a86 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a86;
\set a87 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a87;
\set a88 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a88;
\set a89 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a89;
\set a90 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a90;
\set a91 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a91;
\set a92 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a92;
\set a93 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a93;
\set a94 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a94;
\set a95 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a95;
\set a96 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a96;
\set a97 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a97;
\set a98 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a98;
\set a99 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a99;
\set a100 random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :a100;
